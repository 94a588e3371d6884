//! `?layout=plain` as a [`LockStore`]: the waiting loop in [`crate::backend::waiting`]
//! polls its attempts with the shared back-off (the default sleep), at least every
//! [`POLL_MAX`](super::POLL_MAX); and the listing for `status`, the server's (also each
//! Redlock server's).

use std::time::Duration;

use async_trait::async_trait;

use super::keys::{lock_name, SCAN_PATTERN};
use super::PlainBackend;
use crate::backend::redis::RedisBackend;
use crate::backend::store::{Attempt, LockStore};
use crate::backend::{
    AcquireRequest, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
};
use crate::error::{Error, Result};

/// Keys asked per SCAN call.
const SCAN_COUNT: u64 = 10_000;

#[async_trait]
impl LockStore for PlainBackend {
    /// Nothing: no queue, no subscription.
    type Waiter = ();

    fn describe(&self) -> String {
        self.inner.server.url.clone()
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<()> {
        refuse_queueing(req, &self.inner.server.url)
    }

    async fn attempt(&self, req: &AcquireRequest, _: &mut (), _enqueue: bool) -> Result<Attempt> {
        self.inner.plain_take(req, 0).await
    }

    async fn leave(&self, _req: &AcquireRequest, _: ()) {}

    /// A cancel may have dropped an attempt whose `SET` was made: give it back (only our
    /// own token is ever deleted).
    async fn leave_cancelled(&self, req: &AcquireRequest, _: ()) {
        let _ = self
            .inner
            .plain_release(&req.key, &req.owner, ReleaseMode::All)
            .await;
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.inner.plain_renew(key, owner, ttl).await
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        self.inner.plain_release(key, owner, mode).await
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        self.inner.plain_status(keys).await
    }

    fn heartbeat(&self) -> Duration {
        super::POLL_MAX
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        self.inner.record_run_here(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        self.inner.last_runs_here(key).await
    }
}

/// `--priority` and `--supersede` order a queue this layout cannot keep.
fn refuse_queueing(req: &AcquireRequest, url: &str) -> Result<()> {
    req.queue
        .check(&req.key, url, Some("it keeps no queue of waiters"))
}

impl RedisBackend {
    /// The state of the named keys, in order; with no key, dlock's holders.
    pub(in crate::backend::redis) async fn plain_status(
        &self,
        keys: &[String],
    ) -> Result<Vec<KeyStatus>> {
        if keys.is_empty() {
            return self.list_ours().await;
        }
        let mut all = Vec::with_capacity(keys.len());
        for key in keys {
            all.push(KeyStatus::exclusive(key, self.plain_holder(key).await?));
        }
        Ok(all)
    }

    /// `status` with no key: the keys dlock holds in this layout (found by their holder
    /// hashes), sorted. Keys only applications hold are not listed: nothing marks them.
    async fn list_ours(&self) -> Result<Vec<KeyStatus>> {
        let mut keys = Vec::new();
        for node in self.scan_nodes().await? {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor).arg("MATCH").arg(SCAN_PATTERN);
                scan.arg("COUNT").arg(SCAN_COUNT);
                let mut conn = self.conn().await?;
                let reply = self
                    .call("cannot list locks", conn.on_node(node.as_ref(), &scan))
                    .await?;
                let (next, batch): (u64, Vec<Vec<u8>>) =
                    redis::from_redis_value(reply).map_err(|e| {
                        let url = &self.server.url;
                        Error::Internal(format!("unexpected reply from {url}: {e}"))
                    })?;
                let names = batch.iter().filter_map(|raw| std::str::from_utf8(raw).ok());
                keys.extend(names.filter_map(lock_name).map(String::from));
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        keys.sort_unstable();
        keys.dedup();
        let mut held = Vec::new();
        for key in keys {
            let lock = self.plain_holder(&key).await?;
            if lock.as_ref().is_some_and(|l| l.fencing_token > 0) {
                held.push(KeyStatus::exclusive(key, lock));
            }
        }
        Ok(held)
    }
}
