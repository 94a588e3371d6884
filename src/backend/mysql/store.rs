//! MySQL as a [`LockStore`]: the waiting loop drives the primitives of the other parts.
//!
//! MySQL and MariaDB have nothing like PostgreSQL's LISTEN/NOTIFY (a waiter cannot be
//! woken by a commit on another connection without holding a lock or a session open
//! against the holder), so a waiter looks again on a schedule: the head of the queue,
//! the only one that may take a freed key, every few tens of milliseconds; the others
//! with a back-off that doubles up to a quarter second; each draw jittered so that
//! waiters refused together do not come back together. Every look refreshes the waiter's
//! place, and a lease's expiry bounds every sleep.

use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;

use super::backend::MysqlStore;
use super::connect::Tuning;
use super::lease::MyWaiter;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
};
use crate::error::Result;

/// How long a refused waiter sleeps before looking again: see the module's comment.
pub(super) fn recheck(tuning: &Tuning, busy: &Busy, round: u32) -> Duration {
    let cap = match busy.position {
        Some(1) => tuning.head_recheck,
        _ => Duration::from_millis(10)
            .saturating_mul(1u32 << round.min(16))
            .min(tuning.tail_recheck),
    };
    let ms = cap.as_millis().max(2) as u64;
    Duration::from_millis(rand::thread_rng().gen_range(ms / 2..=ms))
}

#[async_trait]
impl LockStore for MysqlStore {
    type Waiter = MyWaiter;

    fn describe(&self) -> String {
        self.server.target.name.clone()
    }

    async fn begin(&self, _req: &AcquireRequest) -> Result<MyWaiter> {
        Ok(MyWaiter {
            id: crate::holder::new_owner_id(),
        })
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut MyWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        self.attempt_as(req, w, enqueue).await
    }

    async fn sleep(
        &self,
        _req: &AcquireRequest,
        _w: &mut MyWaiter,
        busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        let nap = recheck(&self.server.tuning, busy, round).min(pause);
        tokio::time::sleep(nap).await;
        Ok(Woken::Again)
    }

    async fn leave(&self, req: &AcquireRequest, w: MyWaiter) {
        let _ = self.leave_queue(&req.key, &w.id, &req.owner).await;
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_lease(key, owner, ttl).await
    }

    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let lease = &acquired.lease;
        self.linger_lease(&lease.key, &lease.owner, left).await
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        self.release_lease(key, owner, mode).await
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        self.read_status(keys).await
    }

    fn heartbeat(&self) -> Duration {
        self.server.tuning.heartbeat
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        self.write_run(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        self.read_runs(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rechecks_are_bounded_and_jittered() {
        let t = Tuning::default();
        let head = Busy {
            position: Some(1),
            ..Busy::default()
        };
        let tail = Busy {
            position: Some(3),
            ..Busy::default()
        };
        for round in [0, 1, 5, 40] {
            let h = recheck(&t, &head, round);
            assert!(h >= t.head_recheck / 2 && h <= t.head_recheck, "{h:?}");
            let w = recheck(&t, &tail, round);
            assert!(w <= t.tail_recheck, "{w:?}");
        }
        assert!(recheck(&t, &tail, 0) <= Duration::from_millis(10));
    }
}
