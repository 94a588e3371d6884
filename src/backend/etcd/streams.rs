//! The two streams of the etcd client: a lease's keep-alives, and watches. Both are opened
//! by their first use, and opened again (through the next member, when theirs is gone)
//! after they break.

use std::time::Instant;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tonic::codec::{ProstCodec, Streaming};
use tonic::codegen::http::uri::PathAndQuery;

use super::client::{no_answer, prefix_end, try_timeout, Client, REQUEST_TIMEOUT, RETRY_FOR};
use super::failure::Failure;
use super::proto::*;
use crate::backend::waiting::backoff;
use crate::error::{Error, Result};

/// The two ends of an open bidirectional stream.
pub type Duplex<Req, Resp> = (mpsc::UnboundedSender<Req>, Streaming<Resp>);

/// The streams a client opens: one duplex per call, a keep-alive stream per holder, a
/// watch stream per waiter.
impl Client {
    /// Opens a bidirectional stream with `first` on its way (etcd answers the call only once
    /// a message arrives): what is sent on the returned sender follows in order.
    pub(super) async fn stream<Req, Resp>(
        &self,
        path: &'static str,
        first: Req,
    ) -> std::result::Result<Duplex<Req, Resp>, Failure>
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
            grpc.ready().await.map_err(Failure::unconnected)?;
            let codec = ProstCodec::<Req, Resp>::default();
            grpc.streaming(
                self.request(outgoing),
                PathAndQuery::from_static(path),
                codec,
            )
            .await
            .map(tonic::Response::into_inner)
            .map_err(Failure::answered)
        };
        let incoming = tokio::time::timeout(REQUEST_TIMEOUT, call)
            .await
            .unwrap_or_else(|_| Err(Failure::silent(no_answer(REQUEST_TIMEOUT))))?;
        Ok((tx, incoming))
    }

    /// A keep-alive stream (one per holder, kept for its renewals), opened by its first use.
    pub fn keep_alive(&self) -> KeepAlive {
        KeepAlive::new(self.clone())
    }

    /// A watch stream (one per waiter), opened by its first watch.
    pub fn watch_stream(&self) -> Watch {
        Watch::new(self.clone())
    }
}

/// One side of a `LeaseKeepAlive` stream.
pub struct KeepAlive {
    client: Client,
    stream: Option<Duplex<LeaseKeepAliveRequest, LeaseKeepAliveResponse>>,
    /// The endpoint the stream was opened on: when the client moved off it (another call
    /// found it dead or frozen), the stream is opened again where the client is.
    on: usize,
    /// A round is under way, on this endpoint: when the next call finds it so, the caller
    /// gave up waiting for its answer (a stream stuck behind a frozen member), and a new
    /// stream is opened, through another member.
    pending: Option<usize>,
}

impl KeepAlive {
    pub(super) fn new(client: Client) -> KeepAlive {
        KeepAlive {
            client,
            stream: None,
            on: 0,
            pending: None,
        }
    }

    /// Refreshes `lease` to its granted TTL; the TTL the server answers (0: the lease is
    /// gone). A stream that breaks or stops answering is opened again at once, through the
    /// next member, and tried for up to [`RETRY_FOR`] (at least twice), each try waiting as a
    /// call's does.
    pub async fn once(&mut self, lease: i64) -> Result<i64> {
        if let Some(stuck) = self.pending.take() {
            self.stream = None;
            self.client.failover(stuck).await;
        }
        self.client.leave_abandoned().await;
        let started = Instant::now();
        let mut round = 0;
        loop {
            let used = self.client.channel().0;
            if self.on != used {
                (self.stream, self.on) = (None, used);
            }
            self.pending = Some(used);
            let limit = try_timeout(round);
            let answer = tokio::time::timeout(limit, self.round(lease))
                .await
                .unwrap_or_else(|_| Err(Failure::silent(no_answer(limit))));
            self.pending = None;
            let failure = match answer {
                Ok(ttl) => return Ok(ttl),
                Err(f) => f,
            };
            self.stream = None;
            if !failure.retryable() || (round > 0 && started.elapsed() >= RETRY_FOR) {
                let what = format!("{}: lease keep-alive", self.client.name);
                return Err(failure.into_error(&what));
            }
            self.client.failover(used).await;
            if round > 0 {
                tokio::time::sleep(backoff(round)).await;
            }
            round += 1;
        }
    }

    async fn round(&mut self, lease: i64) -> std::result::Result<i64, Failure> {
        let req = LeaseKeepAliveRequest { id: lease };
        let (_, rx) = match &mut self.stream {
            Some((tx, rx)) => {
                tx.send(req).map_err(|_| Failure::silent("stream closed"))?;
                (tx, rx)
            }
            None => {
                let path = "/etcdserverpb.Lease/LeaseKeepAlive";
                let opened = self.client.stream(path, req).await?;
                let (tx, rx) = self.stream.insert(opened);
                (tx, rx)
            }
        };
        match rx.next().await {
            Some(Ok(resp)) => Ok(resp.ttl),
            Some(Err(s)) => Err(Failure::answered(s)),
            None => Err(Failure::silent("stream closed")),
        }
    }
}

/// One side of a `Watch` stream.
pub struct Watch {
    client: Client,
    stream: Option<Duplex<WatchRequest, WatchResponse>>,
}

impl Watch {
    pub(super) fn new(client: Client) -> Watch {
        Watch {
            client,
            stream: None,
        }
    }

    /// A watch that broke or was never opened: it can be opened again.
    fn fail(&self, e: impl std::fmt::Display) -> Error {
        Error::Transient(format!("{}: watch: {e}", self.client.name))
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
                let path = "/etcdserverpb.Watch/Watch";
                let opened = self.client.stream(path, req).await;
                self.stream = Some(opened.map_err(|f| self.client.error(path, f))?);
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
            // etcd cancels a watch with a reason while its member has no leader ("etcdserver:
            // no leader", during an election) or when the revision was compacted: a watch
            // opened again, after the back-off, may stand.
            Some(Ok(resp)) if resp.canceled && !resp.cancel_reason.is_empty() => {
                return Err(self.fail(&resp.cancel_reason));
            }
            Some(Ok(resp)) => return Ok(resp),
            Some(Err(s)) => Failure::answered(s).text(),
            None => "stream closed".to_string(),
        };
        self.stream = None;
        self.client.failover(used).await;
        Err(self.fail(broken))
    }
}
