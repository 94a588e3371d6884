//! MySQL as a [`LockStore`]: the waiting loop drives the primitives of the other parts.
//!
//! MySQL and MariaDB have nothing like PostgreSQL's LISTEN/NOTIFY: a waiter blocks on the
//! named lock of the one ahead of it (see `wait.rs`). Where that one keeps none, the
//! waiter looks again on a schedule: the head of the queue,
//! the only one that may take a freed key, soon after a new lease began (most holds are
//! short) and then less often, up to every few tens of milliseconds; each waiter
//! behind it as often times the number of hand-offs ahead of it (up to a quarter second),
//! so that it looks often by the time it is the head: a waiter still on a long back-off
//! when the key is freed would leave it idle until its next look. A waiter outside the
//! queue backs off doubling up to a quarter second. Each draw is jittered so that waiters
//! refused together do not come back together. Every look refreshes the waiter's
//! place, and a lease's expiry bounds every sleep.

use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;

use super::backend::MysqlStore;
use super::connect::Tuning;
use super::row::MyWaiter;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
};
use crate::error::Result;

/// How long a refused waiter sleeps before looking again: see the module's comment.
/// `same`: how many looks in a row found the lease now held.
pub(super) fn recheck(tuning: &Tuning, busy: &Busy, round: u32, same: u32) -> Duration {
    let cap = match busy.position {
        Some(1) => doubling(tuning.head_first, same).min(tuning.head_recheck),
        Some(place) => {
            let ahead = place.saturating_sub(1).clamp(1, 64) as u32;
            tuning.head_recheck.saturating_mul(ahead)
        }
        None => doubling(Duration::from_millis(10), round),
    };
    let us = cap.min(tuning.tail_recheck).as_micros().max(2000) as u64;
    Duration::from_micros(rand::thread_rng().gen_range(us / 2..=us))
}

fn doubling(first: Duration, times: u32) -> Duration {
    first.saturating_mul(1u32 << times.min(16))
}

#[async_trait]
impl LockStore for MysqlStore {
    type Waiter = MyWaiter;

    fn describe(&self) -> String {
        self.server.target.name.clone()
    }

    /// Exclusive leases, `--shared` and `--limit N` alike (see `shared.rs`).
    fn supports(&self, _sharing: crate::backend::Sharing) -> bool {
        true
    }

    /// The queue is ordered by priority, then arrival (`NEXT` in `schema.rs`), and keeps
    /// one pending superseding waiter (`supersede` in `row.rs`; woken as `wait.rs` says).
    fn queue_order(&self) -> Option<&'static str> {
        None
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<MyWaiter> {
        Ok(MyWaiter::new(req.queue))
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut MyWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        self.attempt_as(req, w, enqueue)
            .await
            .map_err(|e| self.server.naming(&req.key, e))
    }

    /// Blocked on the named lock of the one ahead (see `wait.rs`), else on the schedule.
    async fn sleep(
        &self,
        req: &AcquireRequest,
        w: &mut MyWaiter,
        busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        let same = w.saw(busy);
        if let Some(wake) = w.wake.take() {
            // A superseding waiter also looks at least every heartbeat: the newer one
            // that ends its block may not be allowed to (see `wait.rs`).
            let most = match wake.head || w.queueing.supersede {
                true => pause.min(self.server.tuning.heartbeat),
                false => pause,
            };
            let blocked = self
                .block_on(w, &req.key, &wake, most)
                .await
                .map_err(|e| self.server.naming(&req.key, e))?;
            if blocked.is_some() {
                return Ok(Woken::Again);
            }
        }
        let nap = recheck(&self.server.tuning, busy, round, same).min(pause);
        tokio::time::sleep(nap).await;
        Ok(Woken::Again)
    }

    async fn leave(&self, req: &AcquireRequest, mut w: MyWaiter) {
        self.end_block(&mut w).await;
        let _ = self.leave_queue(&req.key, &w.id, &req.owner).await;
        if !req.sharing.is_exclusive() {
            // A membership granted by an attempt whose answer never arrived.
            let _ = self
                .release_lease(&req.key, &req.owner, ReleaseMode::All)
                .await;
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_lease(key, owner, ttl)
            .await
            .map_err(|e| self.server.naming(key, e))
    }

    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let lease = &acquired.lease;
        self.linger_lease(&lease.key, &lease.owner, left)
            .await
            .map_err(|e| self.server.naming(&lease.key, e))
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        self.release_lease(key, owner, mode)
            .await
            .map_err(|e| self.server.naming(key, e))
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        self.read_status(keys).await
    }

    /// The longest block behind another waiter: the head and the waiters that look
    /// again on the schedule keep to `heartbeat` themselves.
    fn heartbeat(&self) -> Duration {
        self.server.tuning.behind.max(self.server.tuning.heartbeat)
    }

    /// One key held by a lease whose named lock is held: blocked on it; else polled.
    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        if let [key] = keys {
            let watched = self
                .watch_one(key, pause)
                .await
                .map_err(|e| self.server.naming(key, e))?;
            if watched {
                return Ok(());
            }
        }
        crate::backend::poll(keys, pause).await
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        // The caller's warning names the key and the server already.
        self.write_run(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        self.read_runs(key)
            .await
            .map_err(|e| self.server.naming(key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rechecks_are_bounded_and_jittered() {
        let t = Tuning::default();
        let at = |position| Busy {
            position,
            ..Busy::default()
        };
        for round in [0, 1, 5, 40] {
            let h = recheck(&t, &at(Some(1)), round, 40);
            assert!(h >= t.head_recheck / 2 && h <= t.head_recheck, "{h:?}");
            let h = recheck(&t, &at(Some(1)), round, 0);
            assert!(h >= t.head_first / 2 && h <= t.head_first, "{h:?}");
            let next = recheck(&t, &at(Some(2)), round, 0);
            assert!(
                next >= t.head_recheck / 2 && next <= t.head_recheck,
                "{next:?}"
            );
            let third = recheck(&t, &at(Some(3)), round, 0);
            assert!(
                third >= t.head_recheck && third <= t.head_recheck * 2,
                "{third:?}"
            );
            for place in [20, 1000] {
                let far = recheck(&t, &at(Some(place)), round, 0);
                assert!(
                    far >= t.tail_recheck / 2 && far <= t.tail_recheck,
                    "{far:?}"
                );
            }
            assert!(recheck(&t, &at(None), round, 0) <= t.tail_recheck);
        }
        assert!(recheck(&t, &at(None), 0, 0) <= Duration::from_millis(10));
    }
}
