//! The store-facing seam: what a lock store must provide so that the one waiting loop in
//! [`super::waiting`] can serve it.
//!
//! A store writes only its primitives — one attempt, a way to sleep until something may
//! have changed, leaving the queue, renew, release, status — and gets
//! [`Backend`](super::Backend) from a blanket implementation. Deadlines, cancellation,
//! progress reports, back-off with jitter, undoing a grant that raced a cancel, and the
//! wording of "not obtained" and "cancelled" are the loop's, so they read and behave the
//! same on every store.

use std::time::Duration;

use async_trait::async_trait;

use super::{
    AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, LockInfo, ReleaseMode, Released,
    RunRecord, Sharing, WaitInfo,
};
use crate::error::Result;

/// What a refused attempt found.
#[derive(Debug, Clone, Default)]
pub struct Busy {
    /// Who holds the key; `None` when it is free but promised to a queued waiter.
    pub holder: Option<LockInfo>,
    /// Our 1-based place in the queue, when the store keeps one and we are in it.
    pub position: Option<u64>,
    /// How many wait, when the store can tell.
    pub waiters: Option<u64>,
    /// When what blocks us may expire by itself (the holder's lease): the loop never
    /// sleeps past it without looking again.
    pub retry: Option<Duration>,
}

impl Busy {
    /// What a progress listener is told.
    pub fn info(&self) -> WaitInfo {
        WaitInfo {
            holder: self.holder.clone(),
            position: self.position,
            waiters: self.waiters,
        }
    }

    /// What a report is about: a new one is sent only when this changes.
    pub fn gist(&self) -> (Option<(String, u64)>, Option<u64>, Option<u64>) {
        let holder = self
            .holder
            .as_ref()
            .map(|h| (h.owner.clone(), h.fencing_token));
        (holder, self.position, self.waiters)
    }

    /// `held by OWNER (host pid N: command)`, or why a free key is not ours.
    pub fn describe(&self) -> String {
        match (&self.holder, self.waiters) {
            (Some(lock), _) => format!("held by {}", lock.describe()),
            (None, Some(n)) => format!("free but promised to the first of {n} queued waiter(s)"),
            (None, None) => "free but promised to a queued waiter".to_string(),
        }
    }
}

/// The outcome of one attempt.
pub enum Attempt {
    Granted(Acquired),
    Busy(Busy),
}

/// How a sleep ended.
pub enum Woken {
    /// Something may have changed, or the pause ran out: attempt again.
    Again,
    /// The store made the next attempt on its way out of the sleep (Redis pipelines it
    /// behind its `BLPOP`): the loop uses this answer instead of asking again.
    Answered(Box<Attempt>),
}

/// A lock store, as the waiting loop sees it. Implementors get
/// [`Backend`](super::Backend) for free.
#[async_trait]
pub trait LockStore: Send + Sync {
    /// What one acquisition keeps between attempts: its place in the queue, a
    /// subscription, a connection to block on.
    type Waiter: Send + Sync;

    /// A short description for messages, e.g. `redis://127.0.0.1:6379` (never a password).
    fn describe(&self) -> String;

    /// Whether the store can hold keys as `sharing` asks; the loop refuses the others with
    /// one clear error before touching anything. By default, exclusive leases only.
    fn supports(&self, sharing: Sharing) -> bool {
        sharing.is_exclusive()
    }

    /// Why the store refuses `--priority` and `--supersede` (see [`super::Queueing::check`]);
    /// `None` when its queue honours them. By default it does not.
    fn queue_order(&self) -> Option<&'static str> {
        Some(super::ORDER_NOT_YET)
    }

    /// The state of a new acquisition, before its first attempt.
    async fn begin(&self, req: &AcquireRequest) -> Result<Self::Waiter>;

    /// One attempt: take the key (or re-enter it for one of `req.reenter`), or, refused,
    /// join the queue or keep our place in it when `enqueue` (false for `--no-wait`, a
    /// deadline that has passed, and unfair waiters).
    async fn attempt(
        &self,
        req: &AcquireRequest,
        waiter: &mut Self::Waiter,
        enqueue: bool,
    ) -> Result<Attempt>;

    /// Sleeps until the key may have changed for us, for at most about `pause` (it must
    /// keep to it: the loop enforces only the deadline). A store without
    /// notifications keeps this default: a jittered back-off that grows with `round` (how
    /// many times this acquisition was refused so far). The future may be dropped at any
    /// point (cancel, deadline); [`LockStore::leave`] runs after that.
    async fn sleep(
        &self,
        _req: &AcquireRequest,
        _waiter: &mut Self::Waiter,
        _busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        tokio::time::sleep(super::waiting::pace::backoff(round).min(pause)).await;
        Ok(Woken::Again)
    }

    /// Ends an acquisition that did not return a lease: leave the queue, and give back a
    /// grant to `req.owner` whose answer never arrived (the attempt was dropped). Best
    /// effort and short: the store's own liveness rules remove what this misses.
    async fn leave(&self, req: &AcquireRequest, waiter: Self::Waiter);

    /// [`LockStore::leave`] after a cancel, which may have dropped an attempt or a sleep
    /// halfway: the store may not be answering. The loop gives it at most
    /// [`CANCEL_GRACE`](super::CANCEL_GRACE) and then drops it; a store whose leave must
    /// go out differently then (Redis sends it whole behind the unanswered request)
    /// says so here.
    async fn leave_cancelled(&self, req: &AcquireRequest, waiter: Self::Waiter) {
        self.leave(req, waiter).await
    }

    /// Extends the lease of `owner` on `key` to `ttl` from now. `NotOwner` when the lease is
    /// gone or held by someone else (then nothing changes).
    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease>;

    /// Releases as `mode` says. `NotOwner` when `owner` does not hold it (except `Force`).
    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released>;

    /// The state of the named keys, in order; with no key, every held lock.
    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>>;

    /// See [`Backend::ready`](super::Backend::ready): by default nothing.
    async fn ready(&self, _key: &str) -> Result<()> {
        Ok(())
    }

    /// The longest sleep without news: a waiter looks again at least this often.
    fn heartbeat(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// See [`Backend::linger`](super::Backend::linger): by default the lease is renewed
    /// to `left` and not released. A store whose leases cannot outlive this process
    /// (sessions) overrides it.
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let lease = &acquired.lease;
        self.renew(&lease.key, &lease.owner, left).await?;
        drop(acquired);
        Ok(())
    }

    /// See [`Backend::watch`](super::Backend::watch); the default polls.
    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        super::poll(keys, pause).await
    }

    /// See [`Backend::record_run`](super::Backend::record_run).
    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()>;

    /// See [`Backend::record_run_before_release`](super::Backend::record_run_before_release).
    async fn record_run_before_release(&self, key: &str, run: &RunRecord) -> Result<()> {
        self.record_run(key, run).await
    }

    /// See [`Backend::last_runs`](super::Backend::last_runs).
    async fn last_runs(&self, key: &str) -> Result<LastRuns>;
}
