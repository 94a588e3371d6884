//! The one waiting loop, written once for every [`LockStore`]: attempt, report, sleep until
//! something may have changed, attempt again — until granted, out of time, or cancelled.
//!
//! The loop owns everything that must behave the same on every store: the deadline (one
//! last attempt when it comes, then "not obtained"), cancellation at any point (nothing
//! left held or queued), progress reports only when something changed, how long a sleep
//! may last, a grant that raced a cancel given back, and the wording of both failures.
//! Times are read from tokio's clock so that tests can run it with the clock paused.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::store::{Attempt, Busy, LockStore, Woken};
use super::{AcquireRequest, Acquired, Backend, KeyStatus, Lease, ReleaseMode, Released};
use super::{LastRuns, RunRecord};
use super::{WaitOptions, CANCEL_GRACE};
use crate::error::{Error, Result};

mod holds;
pub mod pace;
mod reach;
pub use self::holds::Holds;
pub use self::pace::{backoff, backoff_within, ride_out_within, BRIEF_RIDE_OUT, LATE, RIDE_OUT};
pub use self::reach::reach;

/// Every lock store is a backend: the loop below does the waiting.
#[async_trait]
impl<S: LockStore> Backend for S {
    fn describe(&self) -> String {
        LockStore::describe(self)
    }

    async fn acquire(&self, req: &AcquireRequest, wait: &WaitOptions) -> Result<Acquired> {
        acquire(self, req, wait).await
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        LockStore::renew(self, key, owner, ttl).await
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        LockStore::release(self, key, owner, mode).await
    }

    async fn ready(&self, key: &str) -> Result<()> {
        LockStore::ready(self, key).await
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        LockStore::status(self, keys).await
    }

    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        LockStore::linger(self, acquired, left).await
    }

    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        LockStore::watch(self, keys, pause).await
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        LockStore::record_run(self, key, run).await
    }

    async fn record_run_before_release(&self, key: &str, run: &RunRecord) -> Result<()> {
        LockStore::record_run_before_release(self, key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        LockStore::last_runs(self, key).await
    }
}

/// Why the loop stopped without a lease.
enum Stop {
    Cancelled,
    Failed(Error),
    /// The store had not answered a try by [`LATE`] past the deadline: the try was dropped
    /// halfway, as a cancel drops it.
    Late(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Failed(e)
    }
}

/// Acquires `req.key` from `store`, waiting as `wait` says.
pub async fn acquire<S: LockStore + ?Sized>(
    store: &S,
    req: &AcquireRequest,
    wait: &WaitOptions,
) -> Result<Acquired> {
    if !store.supports(req.sharing) {
        let asked = req.sharing.describe();
        return Err(Error::sharing_unsupported(
            &req.key,
            &store.describe(),
            &asked,
        ));
    }
    req.queue
        .check(&req.key, &store.describe(), store.queue_order())?;
    let started = Instant::from_std(wait.since);
    // A try of `--no-wait` has no wait to end: the store's own request timeout bounds it.
    let mut faltering = Faltering {
        late: deadline(wait).filter(|_| !wait.expired()).map(|d| d + LATE),
        until: deadline(wait).map(|d| d.max(started + BRIEF_RIDE_OUT)),
        ..Faltering::default()
    };
    let mut waiter = loop {
        let began = match in_time(store, req, wait, &faltering, store.begin(req)).await {
            Ok(began) => began,
            Err(Stop::Late(e)) => return Err(e),
            Err(_) => return Err(cancelled(store, req)),
        };
        match began {
            Ok(w) => break w,
            Err(e) => match faltering.ride_out(store, req, wait, e).await {
                Ok(()) => {}
                Err(Stop::Cancelled) => return Err(cancelled(store, req)),
                Err(Stop::Failed(e) | Stop::Late(e)) => return Err(e),
            },
        }
    };
    let stop = match run(store, req, wait, &mut waiter, started, faltering).await {
        Ok(acquired) => return Ok(acquired),
        Err(stop) => stop,
    };
    Err(match stop {
        Stop::Cancelled => {
            // A signal ends the wait at once, even when the store does not answer: what
            // a silent store never hears of ends by itself (liveness, TTL).
            let leaving = store.leave_cancelled(req, waiter);
            let _ = tokio::time::timeout(CANCEL_GRACE, leaving).await;
            cancelled(store, req)
        }
        Stop::Late(e) => {
            let _ = tokio::time::timeout(CANCEL_GRACE, store.leave_cancelled(req, waiter)).await;
            e
        }
        Stop::Failed(e) => {
            // Best effort, as the store's leave is: a store that has just failed may not
            // answer it, and the caller's wait is over.
            let _ = tokio::time::timeout(LATE, store.leave(req, waiter)).await;
            e
        }
    })
}

fn deadline(wait: &WaitOptions) -> Option<Instant> {
    wait.deadline.map(Instant::from_std)
}

/// Runs `step`, one try of the store, unless the wait is cancelled or the try goes on past
/// [`LATE`] after the deadline (`faltering.late`).
async fn in_time<S: LockStore + ?Sized, T>(
    store: &S,
    req: &AcquireRequest,
    wait: &WaitOptions,
    faltering: &Faltering,
    step: impl std::future::Future<Output = T>,
) -> std::result::Result<T, Stop> {
    let late = async {
        match faltering.late {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = wait.cancel.cancelled() => Err(Stop::Cancelled),
        done = step => Ok(done),
        _ = late => Err(Stop::Late(faltering.late(store, req))),
    }
}

async fn run<S: LockStore + ?Sized>(
    store: &S,
    req: &AcquireRequest,
    wait: &WaitOptions,
    waiter: &mut S::Waiter,
    started: Instant,
    mut faltering: Faltering,
) -> std::result::Result<Acquired, Stop> {
    let no_wait = wait.expired();
    let mut reported = None;
    let mut answered = None;
    for round in 0u32.. {
        let attempt = match answered.take() {
            Some(attempt) => attempt,
            None => {
                let enqueue = req.fair && !wait.expired();
                let attempt = store.attempt(req, waiter, enqueue);
                match in_time(store, req, wait, &faltering, attempt).await? {
                    Ok(attempt) => attempt,
                    Err(e) => {
                        faltering.ride_out(store, req, wait, e).await?;
                        continue;
                    }
                }
            }
        };
        faltering.recovered(store, req);
        let busy = match attempt {
            Attempt::Granted(acquired) => return granted(store, wait, acquired).await,
            Attempt::Busy(busy) => busy,
        };
        if reported.as_ref() != Some(&busy.gist()) {
            reported = Some(busy.gist());
            wait.report(&busy.info());
        }
        if wait.expired() {
            let waited = (!no_wait).then(|| started.elapsed());
            return Err(Stop::Failed(not_obtained(store, req, &busy, waited)));
        }
        if wait.cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        // The store keeps to the pause itself (a server-side timeout may answer a little
        // late, and cutting it short would cost a connection); the loop keeps the deadline.
        let pause = pause(store, wait, &busy);
        let sleep = store.sleep(req, waiter, &busy, pause, round);
        let deadline = async {
            match deadline(wait) {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = wait.cancel.cancelled() => return Err(Stop::Cancelled),
            woken = sleep => match woken {
                Ok(Woken::Answered(a)) => answered = Some(*a),
                Ok(Woken::Again) => {}
                Err(e) => faltering.ride_out(store, req, wait, e).await?,
            },
            _ = deadline => {}
        }
    }
    unreachable!("the rounds of a wait are counted in u32")
}

/// A run of [`Error::Transient`] failures the loop is riding out.
#[derive(Default)]
struct Faltering {
    /// When the first failure of the run came; `None` while the store answers.
    since: Option<Instant>,
    failures: u32,
    /// What the last failure said.
    last: Option<String>,
    /// When a try that has not answered is given up on: [`LATE`] after the deadline of a
    /// wait; never for `--no-wait` or a wait without a deadline.
    late: Option<Instant>,
    /// When failures stop being ridden out: the deadline, but no sooner than
    /// [`BRIEF_RIDE_OUT`] after the start (`--no-wait` too); `None` without a deadline.
    until: Option<Instant>,
}

impl Faltering {
    /// Waits a back-off before the next try after `e`, or stops with `e` when it is not
    /// transient, has lasted [`RIDE_OUT`], or the time to ride it out (`until`) is over.
    async fn ride_out<S: LockStore + ?Sized>(
        &mut self,
        store: &S,
        req: &AcquireRequest,
        wait: &WaitOptions,
        e: Error,
    ) -> std::result::Result<(), Stop> {
        let over = self.until.is_some_and(|u| Instant::now() >= u);
        if !e.is_retryable() || over {
            return Err(Stop::Failed(e));
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        let left = RIDE_OUT.saturating_sub(since.elapsed());
        if left.is_zero() {
            return Err(Stop::Failed(e));
        }
        self.last = Some(e.to_string());
        if self.failures == 0 {
            let (key, backend) = (req.key.as_str(), store.describe());
            log::warn!(target: "dlock", event = "store_faltered", key = key, backend = backend.as_str(), error = e.to_string().as_str();
                "waiting for '{key}': {e}; trying again for up to {}", humantime::format_duration(RIDE_OUT));
        }
        let mut pause = backoff(self.failures).min(left);
        if let Some(u) = self.until {
            pause = pause.min(u.saturating_duration_since(Instant::now()));
        }
        self.failures += 1;
        tokio::select! {
            biased;
            _ = wait.cancel.cancelled() => Err(Stop::Cancelled),
            _ = tokio::time::sleep(pause) => Ok(()),
        }
    }

    /// The store answered again.
    fn recovered<S: LockStore + ?Sized>(&mut self, store: &S, req: &AcquireRequest) {
        if let Some(since) = self.since.take() {
            let (key, backend) = (req.key.as_str(), store.describe());
            let ms = since.elapsed().as_millis() as u64;
            log::info!(target: "dlock", event = "store_recovered", key = key, backend = backend.as_str(), ms = ms;
                "waiting for '{key}': {backend} answers again after {ms}ms");
        }
        self.failures = 0;
        self.last = None;
    }

    /// The error of a wait whose store did not answer its last try in time: what the
    /// store last said, when it was failing.
    fn late<S: LockStore + ?Sized>(&self, store: &S, req: &AcquireRequest) -> Error {
        let (key, backend) = (req.key.as_str(), store.describe());
        let why = match &self.last {
            Some(last) => format!("; it last said: {last}"),
            None => String::new(),
        };
        Error::Unavailable(format!(
            "lock '{key}' on {backend}: no answer by the end of the wait allowed{why}"
        ))
    }
}

/// How long to sleep before looking again: until what blocks us may expire, at most one
/// heartbeat, and never past the deadline.
fn pause<S: LockStore + ?Sized>(store: &S, wait: &WaitOptions, busy: &Busy) -> Duration {
    let mut pause = store.heartbeat();
    if let Some(retry) = busy.retry {
        pause = pause.min(retry);
    }
    if let Some(d) = deadline(wait) {
        pause = pause.min(d.saturating_duration_since(Instant::now()));
    }
    pause
}

/// A grant is returned, unless a cancel came while it was on its way: then it is given
/// back at once.
async fn granted<S: LockStore + ?Sized>(
    store: &S,
    wait: &WaitOptions,
    acquired: Acquired,
) -> std::result::Result<Acquired, Stop> {
    if !wait.cancel.is_cancelled() {
        return Ok(acquired);
    }
    // Bounded as leaving the queue is: a store that stopped answering lets the lease
    // expire by itself.
    let lease = &acquired.lease;
    let giving_back = store.release(&lease.key, &lease.owner, ReleaseMode::One);
    let _ = tokio::time::timeout(CANCEL_GRACE, giving_back).await;
    Err(Stop::Cancelled)
}

fn not_obtained<S: LockStore + ?Sized>(
    store: &S,
    req: &AcquireRequest,
    busy: &Busy,
    waited: Option<std::time::Duration>,
) -> Error {
    Error::not_obtained(&req.key, &store.describe(), &busy.describe(), waited)
}

fn cancelled<S: LockStore + ?Sized>(store: &S, req: &AcquireRequest) -> Error {
    Error::cancelled(&req.key, &store.describe())
}

#[cfg(test)]
mod tests;
