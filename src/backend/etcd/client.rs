//! A small etcd v3 gRPC client: the KV, Lease and Watch calls the lock recipe needs, over
//! tonic with the hand-written messages of [`super::proto`].

use std::time::Duration;

use futures_util::StreamExt;
use std::sync::{Arc, PoisonError, RwLock};

use tokio::sync::mpsc;
use tonic::codec::{ProstCodec, Streaming};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};

use super::proto::*;
use crate::error::{Error, Result};

/// How long one request may take before the store counts as unreachable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A connection to one etcd cluster (any of its endpoints).
#[derive(Clone)]
pub struct Client {
    /// Every endpoint of the cluster, in the order given.
    endpoints: Arc<Vec<Endpoint>>,
    /// The endpoint in use (its index) and its connection.
    current: Arc<RwLock<(usize, Channel)>>,
    /// `etcd://host:port,…` for messages.
    name: String,
    /// User and password, when the cluster has authentication on.
    credentials: Option<Arc<(String, String)>>,
    /// The token `Authenticate` gave, sent with every request.
    token: Arc<RwLock<Option<AsciiMetadataValue>>>,
}

/// What etcd answers when a token has expired (the server drops them after a while).
const STALE_TOKEN: &str = "invalid auth token";

/// The key range holding every key that starts with `prefix` (etcd's `WithPrefix`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff (or empty): the range runs to the end of the key space.
    vec![0]
}

impl Client {
    /// Connects to the cluster behind `endpoints` (`host:port` each): one endpoint is
    /// connected at once (so a wrong address fails here); several are balanced, and a
    /// request goes to one that answers.
    pub async fn connect(
        endpoints: &[String],
        name: &str,
        credentials: Option<(String, String)>,
    ) -> Result<Client> {
        Client::connect_with(endpoints, name, credentials, false).await
    }

    /// [`Client::connect`], over TLS when `tls` (`etcds://`, see [`super::tls`]).
    pub async fn connect_with(
        endpoints: &[String],
        name: &str,
        credentials: Option<(String, String)>,
        tls: bool,
    ) -> Result<Client> {
        let unavailable =
            |e: &dyn std::fmt::Display| Error::Unavailable(format!("{name}: cannot connect: {e}"));
        let mut eps = Vec::new();
        for host in endpoints {
            let bad = |e: &dyn std::fmt::Display| {
                Error::Usage(format!("{name}: bad endpoint {host}: {e}"))
            };
            let scheme = if tls { "https" } else { "http" };
            let mut ep = Endpoint::from_shared(format!("{scheme}://{host}"))
                .map_err(|e| bad(&e))?
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(Duration::from_secs(5));
            if tls {
                ep = ep
                    .tls_config(super::tls::from_env(host)?)
                    .map_err(|e| bad(&e))?;
            }
            eps.push(ep);
        }
        let mut last = None;
        let mut current = None;
        for (i, ep) in eps.iter().enumerate() {
            match ep.connect().await {
                Ok(channel) => {
                    current = Some((i, channel));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(current) = current else {
            return Err(unavailable(
                &last.map_or_else(String::new, |e| e.to_string()),
            ));
        };
        let client = Client {
            endpoints: Arc::new(eps),
            current: Arc::new(RwLock::new(current)),
            name: name.to_string(),
            credentials: credentials.map(Arc::new),
            token: Arc::default(),
        };
        client.authenticate().await?;
        Ok(client)
    }

    /// Logs in with the credentials, if any, and keeps the token for every request.
    async fn authenticate(&self) -> Result<()> {
        let Some(creds) = &self.credentials else {
            return Ok(());
        };
        let req = AuthenticateRequest {
            name: creds.0.clone(),
            password: creds.1.clone(),
        };
        let resp: AuthenticateResponse = self.call("/etcdserverpb.Auth/Authenticate", req).await?;
        let token =
            AsciiMetadataValue::try_from(resp.token).map_err(|e| self.fail("authenticate", e))?;
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = Some(token);
        Ok(())
    }

    /// `req` with the auth token, when there is one.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        let token = self.token.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = token.as_ref() {
            req.metadata_mut().insert("token", token.clone());
        }
        req
    }

    fn channel(&self) -> (usize, Channel) {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Moves to the next endpoint that connects, after endpoint `failed` failed; false when
    /// there is none (or only one endpoint). Another request may have moved on already.
    async fn failover(&self, failed: usize) -> bool {
        let n = self.endpoints.len();
        if n < 2 {
            return false;
        }
        if self.channel().0 != failed {
            return true;
        }
        for step in 1..n {
            let i = (failed + step) % n;
            if let Ok(channel) = self.endpoints[i].connect().await {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = (i, channel);
                return true;
            }
        }
        false
    }

    fn fail(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Unavailable(format!("{}: {what}: {e}", self.name))
    }

    /// One call; a stale auth token is renewed once, and an endpoint that does not answer
    /// is left for the next one (the calls dlock makes may be repeated safely: a create
    /// if absent, a compare-and-put, a revoke; a repeated grant leaves a lease that expires).
    async fn unary<Req, Resp>(&self, path: &'static str, req: Req) -> Result<Resp>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let used = self.channel().0;
        let answer = match self.call(path, req.clone()).await {
            Err(e) if self.unreachable(&e) && self.failover(used).await => {
                self.call(path, req.clone()).await
            }
            other => other,
        };
        match answer {
            Err(e) if self.credentials.is_some() && e.to_string().contains(STALE_TOKEN) => {
                self.authenticate().await?;
                self.call(path, req).await
            }
            other => other,
        }
    }

    /// True for an error that another endpoint may not have: no connection, no answer in
    /// time, or a member that has no leader.
    fn unreachable(&self, e: &Error) -> bool {
        let text = e.to_string();
        [
            "connect",
            "no answer within",
            "Unavailable",
            "transport",
            "no leader",
            "leader changed",
        ]
        .iter()
        .any(|s| text.contains(s))
    }

    async fn call<Req, Resp>(&self, path: &'static str, req: Req) -> Result<Resp>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel().1);
        let call = async {
            grpc.ready().await.map_err(|e| self.fail(path, e))?;
            let codec = ProstCodec::<Req, Resp>::default();
            grpc.unary(self.request(req), PathAndQuery::from_static(path), codec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| self.fail(path_name(path), status_text(&s)))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, call)
            .await
            .map_err(|_| self.fail(path, format!("no answer within {REQUEST_TIMEOUT:?}")))?
    }

    /// Opens a bidirectional stream with `first` on its way (etcd answers the call only once
    /// a message arrives): what is sent on the returned sender follows in order.
    async fn stream<Req, Resp>(
        &self,
        path: &'static str,
        first: Req,
    ) -> Result<(mpsc::UnboundedSender<Req>, Streaming<Resp>)>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel::<Req>();
        let _ = tx.send(first);
        let outgoing =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        let mut grpc = tonic::client::Grpc::new(self.channel().1);
        let call = async {
            grpc.ready().await.map_err(|e| self.fail(path, e))?;
            let codec = ProstCodec::<Req, Resp>::default();
            grpc.streaming(
                self.request(outgoing),
                PathAndQuery::from_static(path),
                codec,
            )
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| self.fail(path_name(path), status_text(&s)))
        };
        let incoming = tokio::time::timeout(REQUEST_TIMEOUT, call)
            .await
            .map_err(|_| self.fail(path, format!("no answer within {REQUEST_TIMEOUT:?}")))??;
        Ok((tx, incoming))
    }

    pub async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.unary("/etcdserverpb.KV/Range", req).await
    }

    pub async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        self.unary("/etcdserverpb.KV/Put", req).await
    }

    pub async fn delete(&self, req: DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        self.unary("/etcdserverpb.KV/DeleteRange", req).await
    }

    /// Deletes one key.
    pub async fn delete_key(&self, key: Vec<u8>) -> Result<DeleteRangeResponse> {
        self.delete(DeleteRangeRequest {
            key,
            ..Default::default()
        })
        .await
    }

    pub async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        self.unary("/etcdserverpb.KV/Txn", req).await
    }

    /// A lease of `ttl` whole seconds (the server may raise it to its minimum).
    pub async fn grant(&self, ttl: i64) -> Result<LeaseGrantResponse> {
        self.grant_id(ttl, 0).await
    }

    /// [`Client::grant`] with the lease id `id` (0: the server chooses).
    pub async fn grant_id(&self, ttl: i64, id: i64) -> Result<LeaseGrantResponse> {
        let resp: LeaseGrantResponse = self
            .unary(
                "/etcdserverpb.Lease/LeaseGrant",
                LeaseGrantRequest { ttl, id },
            )
            .await?;
        if !resp.error.is_empty() {
            return Err(self.fail("lease grant", &resp.error));
        }
        Ok(resp)
    }

    /// Revokes `lease`, deleting every key attached to it. A lease already gone is no error.
    pub async fn revoke(&self, lease: i64) -> Result<()> {
        self.revoke_found(lease).await.map(drop)
    }

    /// [`Client::revoke`], saying whether the lease was there to revoke.
    pub async fn revoke_found(&self, lease: i64) -> Result<bool> {
        let req = LeaseRevokeRequest { id: lease };
        match self
            .unary::<_, LeaseRevokeResponse>("/etcdserverpb.Lease/LeaseRevoke", req)
            .await
        {
            Err(Error::Unavailable(e)) if e.contains("lease not found") => Ok(false),
            other => other.map(|_| true),
        }
    }

    pub async fn time_to_live(&self, lease: i64) -> Result<LeaseTimeToLiveResponse> {
        let req = LeaseTimeToLiveRequest {
            id: lease,
            keys: false,
        };
        self.unary("/etcdserverpb.Lease/LeaseTimeToLive", req).await
    }

    /// A keep-alive stream (one per holder, kept for its renewals), opened by its first use.
    pub fn keep_alive(&self) -> KeepAlive {
        KeepAlive {
            client: self.clone(),
            stream: None,
            pending: false,
        }
    }

    /// A watch stream (one per waiter), opened by its first watch.
    pub fn watch_stream(&self) -> Watch {
        Watch {
            client: self.clone(),
            stream: None,
        }
    }
}

/// The two ends of an open bidirectional stream.
type Duplex<Req, Resp> = (mpsc::UnboundedSender<Req>, Streaming<Resp>);

/// One side of a `LeaseKeepAlive` stream.
pub struct KeepAlive {
    client: Client,
    stream: Option<Duplex<LeaseKeepAliveRequest, LeaseKeepAliveResponse>>,
    /// A round is under way: when the next call finds it so, the caller gave up waiting
    /// for its answer (a stream stuck behind a dead leader), and a new stream is opened.
    pending: bool,
}

impl KeepAlive {
    /// Refreshes `lease` to its granted TTL; the TTL the server answers (0: the lease is
    /// gone). A failed stream is dropped and opened again by the next call.
    pub async fn once(&mut self, lease: i64) -> Result<i64> {
        let used = self.client.channel().0;
        if self.pending {
            self.stream = None;
        }
        self.pending = true;
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, self.round(lease)).await;
        self.pending = false;
        let answer =
            answer.unwrap_or_else(|_| Err(format!("no answer within {REQUEST_TIMEOUT:?}")));
        match answer {
            Ok(ttl) => Ok(ttl),
            Err(e) => {
                // The next renewal opens a new stream, on another endpoint if this one is gone.
                self.stream = None;
                self.client.failover(used).await;
                Err(self.client.fail("lease keep-alive", e))
            }
        }
    }

    async fn round(&mut self, lease: i64) -> std::result::Result<i64, String> {
        let req = LeaseKeepAliveRequest { id: lease };
        let (_, rx) = match &mut self.stream {
            Some((tx, rx)) => {
                tx.send(req).map_err(|_| "stream closed".to_string())?;
                (tx, rx)
            }
            None => {
                let path = "/etcdserverpb.Lease/LeaseKeepAlive";
                let opened = self.client.stream(path, req).await;
                let (tx, rx) = self.stream.insert(opened.map_err(|e| e.to_string())?);
                (tx, rx)
            }
        };
        match rx.next().await {
            Some(Ok(resp)) => Ok(resp.ttl),
            Some(Err(s)) => Err(status_text(&s)),
            None => Err("stream closed".into()),
        }
    }
}

/// One side of a `Watch` stream.
pub struct Watch {
    client: Client,
    stream: Option<Duplex<WatchRequest, WatchResponse>>,
}

impl Watch {
    fn fail(&self, e: impl std::fmt::Display) -> Error {
        self.client.fail("watch", e)
    }

    fn send(&mut self, req: WatchRequest) -> Result<()> {
        match &self.stream {
            Some((tx, _)) => tx.send(req).map_err(|_| self.fail("stream closed")),
            None => Err(self.fail("no watch open")),
        }
    }

    /// Watches `key` from `start_revision` on (0: from now); returns once the server
    /// confirms, with the watch id.
    pub async fn create(&mut self, key: &[u8], start_revision: i64) -> Result<i64> {
        let create = WatchCreateRequest {
            key: key.to_vec(),
            start_revision,
            ..Default::default()
        };
        self.open(create).await
    }

    /// Watches every change to the keys from `key` up to (not including) `range_end`, from
    /// `start_revision` on, as [`Watch::create`].
    pub async fn create_range(
        &mut self,
        key: &[u8],
        range_end: &[u8],
        start_revision: i64,
    ) -> Result<i64> {
        let create = WatchCreateRequest {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
            start_revision,
            ..Default::default()
        };
        self.open(create).await
    }

    /// Watches the deletions of every key under `prefix` from `start_revision` on, as
    /// [`Watch::create`].
    pub async fn create_prefix(&mut self, prefix: &[u8], start_revision: i64) -> Result<i64> {
        self.under(prefix, start_revision, FilterType::NoPut).await
    }

    /// Watches the writes (no deletions) of every key under `prefix`, as
    /// [`Watch::create_prefix`].
    pub async fn create_prefix_puts(&mut self, prefix: &[u8], start_revision: i64) -> Result<i64> {
        self.under(prefix, start_revision, FilterType::NoDelete)
            .await
    }

    async fn under(
        &mut self,
        prefix: &[u8],
        start_revision: i64,
        left_out: FilterType,
    ) -> Result<i64> {
        let create = WatchCreateRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            start_revision,
            filters: vec![left_out as i32],
            ..Default::default()
        };
        self.open(create).await
    }

    async fn open(&mut self, create: WatchCreateRequest) -> Result<i64> {
        let req = WatchRequest {
            request_union: Some(WatchRequestUnion::Create(create)),
        };
        match self.stream {
            Some(_) => self.send(req)?,
            None => {
                let opened = self.client.stream("/etcdserverpb.Watch/Watch", req).await?;
                self.stream = Some(opened);
            }
        }
        loop {
            let resp = tokio::time::timeout(REQUEST_TIMEOUT, self.next())
                .await
                .map_err(|_| self.fail(format!("no answer within {REQUEST_TIMEOUT:?}")))??;
            if resp.created {
                return Ok(resp.watch_id);
            }
        }
    }

    /// Stops watch `id` (its last answers may still arrive).
    pub fn cancel(&mut self, id: i64) -> Result<()> {
        let cancel = WatchCancelRequest { watch_id: id };
        let req = WatchRequest {
            request_union: Some(WatchRequestUnion::Cancel(cancel)),
        };
        self.send(req)
    }

    /// The next answer on the stream. A broken stream is dropped, and the client moves on
    /// to another endpoint when its member is gone: watching again (a new `create`) goes
    /// to one that answers.
    pub async fn next(&mut self) -> Result<WatchResponse> {
        let used = self.client.channel().0;
        let Some((_, rx)) = &mut self.stream else {
            return Err(self.fail("no watch open"));
        };
        let broken = match rx.next().await {
            Some(Ok(resp)) if resp.canceled && !resp.cancel_reason.is_empty() => {
                return Err(self.fail(&resp.cancel_reason))
            }
            Some(Ok(resp)) => return Ok(resp),
            Some(Err(s)) => status_text(&s),
            None => "stream closed".to_string(),
        };
        self.stream = None;
        self.client.failover(used).await;
        Err(self.fail(broken))
    }
}

/// `KV/Range` from `/etcdserverpb.KV/Range`.
fn path_name(path: &str) -> &str {
    path.strip_prefix("/etcdserverpb.").unwrap_or(path)
}

fn status_text(s: &tonic::Status) -> String {
    if s.message().is_empty() {
        format!("{:?}", s.code())
    } else {
        s.message().to_string()
    }
}
