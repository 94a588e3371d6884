//! A small etcd v3 gRPC client: the KV, Lease and Watch calls the lock recipe needs, over
//! tonic with the hand-written messages of [`super::proto`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tonic::codec::ProstCodec;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};

use super::failure::Failure;
use super::proto::*;
use crate::backend::waiting::backoff;
use crate::error::{connection_lost, Error, Result};

/// How long one request may take before the store counts as unreachable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first try of a call waits for its answer before it is sent again through
/// the next member; each try after waits twice as long, up to [`REQUEST_TIMEOUT`]. A frozen
/// member costs a second, not a holder's whole renewal.
const FIRST_TRY: Duration = Duration::from_secs(1);

/// How long try `round` (from 0) of a call waits for its answer.
pub(super) fn try_timeout(round: u32) -> Duration {
    FIRST_TRY
        .saturating_mul(1 << round.min(8))
        .min(REQUEST_TIMEOUT)
}
/// How long a call is tried again (on another member, after a back-off) while it meets
/// failures the next try may not: long enough for an election, after which the caller
/// gets [`Error::Transient`] (a waiter rides it out, a holder's renewal tries again).
pub const RETRY_FOR: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A connection to one etcd cluster (any of its endpoints).
#[derive(Clone)]
pub struct Client {
    /// Every endpoint of the cluster, in the order given.
    endpoints: Arc<Vec<Endpoint>>,
    /// The endpoint in use (its index) and its connection.
    current: Arc<RwLock<(usize, Channel)>>,
    /// `etcd://host:port,…` for messages.
    pub(super) name: String,
    /// User and password, when the cluster has authentication on.
    credentials: Option<Arc<(String, String)>>,
    /// The token `Authenticate` gave, sent with every request.
    token: Arc<RwLock<Option<AsciiMetadataValue>>>,
    /// 1 + the endpoint a call was given up on before it was answered (its caller timed
    /// out first: a frozen member), 0 for none: the next call moves to another endpoint.
    abandoned: Arc<AtomicUsize>,
    /// Some call was answered: until then, a member that does not answer is one that
    /// cannot be reached at all (a refused TLS handshake shows only at the first call).
    answered: Arc<AtomicBool>,
}

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
            return Err(not_connected(name, last));
        };
        let client = Client {
            endpoints: Arc::new(eps),
            current: Arc::new(RwLock::new(current)),
            name: name.to_string(),
            credentials: credentials.map(Arc::new),
            token: Arc::default(),
            abandoned: Arc::default(),
            answered: Arc::default(),
        };
        let path = "/etcdserverpb.Auth/Authenticate";
        client
            .authenticate()
            .await
            .map_err(|f| client.error(path, f))?;
        Ok(client)
    }

    /// Logs in with the credentials, if any, and keeps the token for every request.
    async fn authenticate(&self) -> std::result::Result<(), Failure> {
        let Some(creds) = &self.credentials else {
            return Ok(());
        };
        let req = AuthenticateRequest {
            name: creds.0.clone(),
            password: creds.1.clone(),
        };
        let path = "/etcdserverpb.Auth/Authenticate";
        let resp: AuthenticateResponse = self.call(path, req, REQUEST_TIMEOUT).await?;
        let token = AsciiMetadataValue::try_from(resp.token).map_err(|e| {
            Failure::answered(tonic::Status::internal(format!("unusable token: {e}")))
        })?;
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = Some(token);
        Ok(())
    }

    /// `req` with the auth token, when there is one.
    pub(super) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        let token = self.token.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = token.as_ref() {
            req.metadata_mut().insert("token", token.clone());
        }
        req
    }

    pub(super) fn channel(&self) -> (usize, Channel) {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Moves to the next endpoint that connects, after endpoint `failed` failed; false when
    /// there is none (or only one endpoint). Another request may have moved on already.
    pub(super) async fn failover(&self, failed: usize) -> bool {
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

    pub(super) fn fail(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Unavailable(format!("{}: {what}: {e}", self.name))
    }

    /// The error `f` is for a call of `path`, of its kind (see [`Failure::into_error`]);
    /// no connection to a cluster that never answered says so, and is transient as every
    /// lost connection is, unless the handshake was refused (it would be again).
    pub(super) fn error(&self, path: &str, f: Failure) -> Error {
        let what = format!("{}: {}", self.name, path_name(path));
        match (self.unreached(&f), f.handshake_refused) {
            (true, false) => Error::Transient(format!("{what}: cannot connect: {}", f.text())),
            (true, true) => Error::Unavailable(format!("{what}: cannot connect: {}", f.text())),
            (false, _) => f.into_error(&what),
        }
    }

    /// `f` is no connection, and no call of this client was ever answered.
    pub(super) fn unreached(&self, f: &Failure) -> bool {
        f.unconnected && !self.answered.load(Ordering::Relaxed)
    }

    /// Moves off the endpoint a call was given up on, if it is still the one in use.
    pub(super) async fn leave_abandoned(&self) {
        let abandoned = self.abandoned.swap(0, Ordering::Relaxed);
        if abandoned > 0 {
            self.failover(abandoned - 1).await;
        }
    }

    /// One call, as [`Client::call_raw`] does it, its failure worded.
    async fn unary<Req, Resp>(&self, path: &'static str, req: Req) -> Result<Resp>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.call_raw(path, req)
            .await
            .map_err(|f| self.error(path, f))
    }

    /// One call, tried again for up to [`RETRY_FOR`] while it fails in a way the next try
    /// may not (no answer, no leader, a leader change), each time through the next
    /// endpoint and after a back-off; a stale auth token is renewed once. Every call dlock
    /// makes may be sent again: a create if absent, a compare-and-put, a revoke, a grant of
    /// a lease id of our choosing (its "already exists" is ours, see [`Client::grant_id`]),
    /// and the failure says when it was (`retried`).
    async fn call_raw<Req, Resp>(
        &self,
        path: &'static str,
        req: Req,
    ) -> std::result::Result<Resp, Failure>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.leave_abandoned().await;
        let started = Instant::now();
        let (mut round, mut logged_in) = (0, false);
        loop {
            let used = self.channel().0;
            let mut failure = match self.call(path, req.clone(), try_timeout(round)).await {
                Ok(resp) => return Ok(resp),
                Err(f) => f,
            };
            failure.retried = round > 0;
            if failure.stale_token() && self.credentials.is_some() && !logged_in {
                logged_in = true;
                self.authenticate().await?;
                continue;
            }
            // A try that timed out gets one more, through another member, however long
            // it took. Never connected, each endpoint is tried once.
            let tried_all = self.unreached(&failure) && round as usize + 1 >= self.endpoints.len();
            if !failure.retryable() || tried_all || (round > 0 && started.elapsed() >= RETRY_FOR) {
                return Err(failure);
            }
            self.failover(used).await;
            tokio::time::sleep(backoff(round)).await;
            round += 1;
        }
    }

    /// One try of one call, within `limit`.
    async fn call<Req, Resp>(
        &self,
        path: &'static str,
        req: Req,
        limit: Duration,
    ) -> std::result::Result<Resp, Failure>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let (used, channel) = self.channel();
        let mut pending = Pending {
            abandoned: Some((&self.abandoned, used)),
        };
        let mut grpc = tonic::client::Grpc::new(channel);
        let call = async {
            grpc.ready().await.map_err(Failure::unconnected)?;
            let codec = ProstCodec::<Req, Resp>::default();
            grpc.unary(self.request(req), PathAndQuery::from_static(path), codec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(Failure::answered)
        };
        let answer = tokio::time::timeout(limit, call)
            .await
            .unwrap_or_else(|_| Err(Failure::silent(no_answer(limit))));
        pending.abandoned = None;
        if !matches!(&answer, Err(f) if f.status.is_none()) {
            self.answered.store(true, Ordering::Relaxed);
        }
        answer
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

    /// [`Client::txn`] for a transaction that puts keys on a lease: `None` when etcd
    /// answers that the lease does not exist (it expired, or was revoked).
    pub async fn txn_on_lease(&self, req: TxnRequest) -> Result<Option<TxnResponse>> {
        let path = "/etcdserverpb.KV/Txn";
        match self.call_raw(path, req).await {
            Ok(resp) => Ok(Some(resp)),
            Err(f) if f.lease_not_found() => Ok(None),
            Err(f) => Err(self.error(path, f)),
        }
    }

    /// A lease of `ttl` whole seconds (the server may raise it to its minimum), with an id
    /// of our choosing, so that a grant sent again is no second lease.
    pub async fn grant(&self, ttl: i64) -> Result<LeaseGrantResponse> {
        self.grant_id(ttl, new_lease_id()).await
    }

    /// [`Client::grant`] with the lease id `id`, a random one of ours: etcd's "lease
    /// already exists" means that an earlier try of this grant went through (an answer
    /// lost to a leader change or a dead member), and the lease is ours.
    pub async fn grant_id(&self, ttl: i64, id: i64) -> Result<LeaseGrantResponse> {
        let path = "/etcdserverpb.Lease/LeaseGrant";
        let resp: LeaseGrantResponse =
            match self.call_raw(path, LeaseGrantRequest { ttl, id }).await {
                Ok(resp) => resp,
                Err(f) if f.lease_exists() && id != 0 => {
                    let granted = self.time_to_live(id).await?;
                    return Ok(LeaseGrantResponse {
                        id,
                        ttl: granted.granted_ttl,
                        ..Default::default()
                    });
                }
                Err(f) => return Err(self.error(path, f)),
            };
        if !resp.error.is_empty() {
            return Err(self.fail("lease grant", &resp.error));
        }
        Ok(resp)
    }

    /// Revokes `lease`, deleting every key attached to it. A lease already gone is no error.
    pub async fn revoke(&self, lease: i64) -> Result<()> {
        self.revoke_found(lease).await.map(drop)
    }

    /// [`Client::revoke`], saying whether the lease was there to revoke (or may have been,
    /// when an earlier try of this revoke may have gone through).
    pub async fn revoke_found(&self, lease: i64) -> Result<bool> {
        let path = "/etcdserverpb.Lease/LeaseRevoke";
        let req = LeaseRevokeRequest { id: lease };
        match self.call_raw::<_, LeaseRevokeResponse>(path, req).await {
            Ok(_) => Ok(true),
            Err(f) if f.lease_not_found() => Ok(f.retried),
            Err(f) => Err(self.error(path, f)),
        }
    }

    pub async fn time_to_live(&self, lease: i64) -> Result<LeaseTimeToLiveResponse> {
        let req = LeaseTimeToLiveRequest {
            id: lease,
            keys: false,
        };
        self.unary("/etcdserverpb.Lease/LeaseTimeToLive", req).await
    }
}

/// `KV/Range` from `/etcdserverpb.KV/Range`.
fn path_name(path: &str) -> &str {
    path.strip_prefix("/etcdserverpb.").unwrap_or(path)
}

pub(super) fn no_answer(limit: Duration) -> String {
    format!("no answer within {limit:?}")
}

/// A call under way: dropped before it ends (its caller gave up waiting), it marks its
/// endpoint as abandoned, for the next call to move off it.
struct Pending<'a> {
    abandoned: Option<(&'a AtomicUsize, usize)>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some((abandoned, used)) = self.abandoned {
            abandoned.store(used + 1, Ordering::Relaxed);
        }
    }
}

/// A lease id of our own choosing (positive, never 0, which asks etcd to choose), so that a
/// key can be put on the lease in the same breath as the lease is granted.
pub fn new_lease_id() -> i64 {
    (crate::ids::random_u64() >> 1).max(1) as i64
}

/// No endpoint of `name` took a connection; `last` says why the last one did not. A
/// refused or lost connection may pass ([`Error::Transient`]); a refused handshake will not.
fn not_connected(name: &str, last: Option<tonic::transport::Error>) -> Error {
    let lost = last.as_ref().is_some_and(|e| connection_lost(e));
    let why = last.map_or_else(String::new, |e| match crate::error::io_error(&e) {
        Some(io) => format!("{e} ({io})"),
        None => e.to_string(),
    });
    let msg = format!("{name}: cannot connect: {why}");
    match lost {
        true => Error::Transient(msg),
        false => Error::Unavailable(msg),
    }
}
