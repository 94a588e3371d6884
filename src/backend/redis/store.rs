//! Redis as a [`LockStore`]: the waiting loop in [`crate::backend::waiting`] drives the
//! primitives of the other parts. A server of a Redlock quorum whose URL says
//! `?layout=plain` renews, releases and reads status with the plain scripts (`plain/`).

use std::time::Duration;

use async_trait::async_trait;

use super::backend::RedisBackend;
use super::wait::Waiter;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{AcquireRequest, Acquired, KeyStatus, Lease, ReleaseMode, Released};
use crate::error::Result;

#[async_trait]
impl LockStore for RedisBackend {
    type Waiter = Waiter;

    fn describe(&self) -> String {
        self.server.url.clone()
    }

    /// Exclusive leases, `--shared` and `--limit N` alike (see `share.lua`).
    fn supports(&self, _sharing: crate::backend::Sharing) -> bool {
        true
    }

    /// The scripts order the queue by priority and arrival, and keep one pending
    /// superseding waiter (see `join` and `supersede` in `redis/common.lua`).
    fn queue_order(&self) -> Option<&'static str> {
        None
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<Waiter> {
        let conn = self.conn().await?;
        Ok(self.waiter(req, conn))
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        let attempt = self.attempt_as(req, waiter, enqueue).await?;
        self.acknowledged(req, waiter, attempt).await
    }

    async fn sleep(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        _busy: &Busy,
        pause: Duration,
        _round: u32,
    ) -> Result<Woken> {
        match self.sleep_as(req, waiter, pause).await? {
            Woken::Answered(attempt) => {
                let attempt = self.acknowledged(req, waiter, *attempt).await?;
                Ok(Woken::Answered(Box::new(attempt)))
            }
            woken => Ok(woken),
        }
    }

    async fn leave(&self, _req: &AcquireRequest, waiter: Waiter) {
        self.leave_as(waiter).await
    }

    async fn leave_cancelled(&self, _req: &AcquireRequest, mut waiter: Waiter) {
        self.leave_after_cancel(&mut waiter).await
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        if self.plain() {
            return self.plain_renew(key, owner, ttl).await;
        }
        self.renew_lease(key, owner, ttl).await
    }

    /// A release that meets a failover (see `connect.rs`) is tried again, on the master
    /// found again, within the operation timeout: otherwise the lease would stay held, and
    /// its waiters wait, until it expires. Only a whole release is: taking one level of a
    /// re-entered lease twice (the first reply lost) would take its parent's.
    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        if self.plain() {
            return self.plain_release(key, owner, mode).await;
        }
        let kept = self.kept_run(key, owner);
        let started = std::time::Instant::now();
        for round in 0u32.. {
            let released = self
                .release_with(key, owner, (mode, true), kept.as_ref())
                .await;
            let again = mode != ReleaseMode::One
                && started.elapsed() < self.server.tuning.op_timeout
                && released.as_ref().is_err_and(|e| e.is_retryable());
            if !again {
                return released;
            }
            tokio::time::sleep(crate::backend::waiting::backoff(round)).await;
        }
        unreachable!("the rounds of a release are counted in u32")
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        if self.plain() {
            return self.plain_status(keys).await;
        }
        self.read_status(keys).await
    }

    fn heartbeat(&self) -> Duration {
        self.server.tuning.heartbeat
    }

    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let lease = &acquired.lease;
        self.linger_lease(&lease.key, &lease.owner, left).await
    }

    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        self.watch_released(keys, pause).await
    }

    async fn record_run(&self, key: &str, run: &crate::backend::RunRecord) -> Result<()> {
        self.record_run_here(key, run).await
    }

    /// Kept for the release script, which writes it (see `runs.rs`).
    async fn record_run_before_release(
        &self,
        key: &str,
        run: &crate::backend::RunRecord,
    ) -> Result<()> {
        self.keep_run(key, run);
        Ok(())
    }

    async fn last_runs(&self, key: &str) -> Result<crate::backend::LastRuns> {
        self.last_runs_here(key).await
    }
}
