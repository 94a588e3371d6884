//! How a Redlock waiter waits: release messages, back-off, and when to give up.
//!
//! Redlock waiters are **not** served in arrival order: there is no queue across servers,
//! and no queue entry is ever written (so none can be left behind). Taking back a grant
//! that did not make a majority wakes nobody.
//!
//! A release wakes every waiter of the key, and a retry costs a request to every server.
//! So that a herd of waiters does not turn into load that makes healthy servers look dead,
//! a waiter paces itself ([`Pace`]):
//!
//! * it listens on one server, the *lead* (the smallest URL; the others when the lead
//!   cannot be reached), with one subscription for its whole wait, and drops the messages
//!   that arrived before an attempt was sent (that attempt already saw those releases);
//! * after a release message it retries within [`RedlockTuning::jitter`], asking the lead
//!   first and stopping there if the lead refuses: contenders meet on one server, which
//!   grants one of them, instead of splitting the vote between them;
//! * a race lost (someone else got the lock first), a split vote, or a round without a
//!   majority of answers in time is a sign of contention: the waiter backs off for a
//!   random time, *not* listening: the one back-off of every store
//!   ([`backoff`]), at most [`RedlockTuning::max_backoff`]; then it looks once more (lead first) and listens
//!   again. The more waiters, the more races each one loses, so the fewer of them are
//!   listening at each release;
//! * a server that did not answer in time is busy, not dead: the next attempt gives it
//!   twice as long, up to [`max_acquire_timeout`]. The wait fails with `Unavailable` when
//!   no majority answered, or a majority was down (connection refused or reset), for the
//!   whole time allowed: the deadline, at least [`BRIEF_RIDE_OUT`] (`--no-wait` too), and
//!   at most [`RedlockTuning::stall`];
//! * looking again after a heartbeat or at the expiry of the lease asks every server at
//!   once, as the first attempt does: a stale lease left on the lead alone cannot block
//!   the waiters.
//!
//! In the plain layout (`?layout=plain` on every server) nothing announces a release:
//! applications publish nothing. The waiter subscribes to nothing and polls, asking every
//! server, at most [`PLAIN_POLL_MAX`] apart (a back-off after a lost race too).
//!
//! # Why Redlock keeps its own loop
//!
//! The other network stores wait in the one generic loop of [`crate::backend::waiting`].
//! Redlock does not, because that loop would change what it does and says:
//!
//! * its failures read differently: "held by OWNER on 2 of 3 servers of redlock(…)", or
//!   "could not be taken on a majority", with why the last round was lost and which
//!   servers did not answer; the loop words "not obtained" itself, from a [`Busy`]
//!   that has no room for counts, notes or per-server errors;
//! * it ends a wait with `Unavailable` (exit 69) when no majority answered for the stall
//!   limit, or a majority was down for the operation timeout: that is decided across
//!   rounds, from every lost round's counts, where the loop sees one attempt at a time;
//! * its pace — ask the lead server first after a release or a back-off, back off
//!   without listening after a race lost or a split vote, give slow servers longer —
//!   depends on the whole lost round and on what woke the waiter, not on a [`Busy`];
//! * a round cut short by a cancel is given back on every server (the round's guard),
//!   not by leaving a queue.
//!
//! Porting it means growing the seam (a store's own "not obtained" wording, a refusal
//! richer than [`Busy`]), which every store builds on; until then the vote counting is
//! shared ([`crate::backend::quorum::votes`]) and the loop stays here.
//!
//! [`Busy`]: crate::backend::store::Busy

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, FutureExt};
use futures_util::stream::StreamExt;
use rand::Rng;
use redis::aio::PubSub;
use tokio_util::sync::CancellationToken;

use super::backend::RedlockBackend;
use super::round::{Refusal, Round};
use super::tuning::{acquire_timeout, max_acquire_timeout, RedlockTuning};
use crate::backend::quorum::outcome::joined;
use crate::backend::quorum::votes;
use crate::backend::redis::{RedisBackend, PLAIN_POLL_MAX};
use crate::backend::waiting::{backoff, BRIEF_RIDE_OUT};
use crate::backend::{
    AcquireRequest, Acquired, Backend, Lease, ReleaseMode, WaitOptions, CANCEL_GRACE,
};
use crate::error::{Error, Result};

/// The release channels a waiter listens to: the lead server's, or every other server's.
pub(super) struct Wakeups {
    subs: Vec<PubSub>,
}

enum Wake {
    Message,
    Timeout,
    Closed,
    Cancelled,
}

impl Wakeups {
    /// Sleeps until a message on any server, `pause`, or a cancel.
    async fn wait(&mut self, pause: Duration, cancel: &CancellationToken) -> Wake {
        if self.subs.is_empty() {
            return tokio::select! {
                _ = cancel.cancelled() => Wake::Cancelled,
                _ = tokio::time::sleep(pause) => Wake::Timeout,
            };
        }
        let streams = self.subs.iter_mut().map(|p| p.on_message().boxed());
        let mut any = futures_util::stream::select_all(streams);
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Wake::Cancelled,
            m = any.next() => if m.is_some() { Wake::Message } else { Wake::Closed },
            _ = tokio::time::sleep(pause) => Wake::Timeout,
        }
    }

    /// Drops the messages already received: the attempt about to be sent sees those
    /// releases, so they must not wake the waiter once more afterwards.
    fn drain(&mut self) {
        for sub in &mut self.subs {
            let mut messages = sub.on_message();
            while let Some(Some(_)) = messages.next().now_or_never() {}
        }
    }
}

/// What a waiter does after a lost round.
enum Step {
    /// Listen for a release, at most until the lease seen may expire or one heartbeat.
    Listen,
    /// Sleep this long without listening, then try again.
    BackOff(Duration),
}

/// A waiter's pace (see the module documentation).
struct Pace {
    tuning: RedlockTuning,
    /// Races lost and rounds without a majority of answers in time: the back-off bound
    /// doubles with each.
    losses: u32,
    /// The next round follows a release message, which every waiter heard.
    raced: bool,
    /// The next round asks the lead server first (it follows a release or a back-off).
    contended: bool,
    /// Each server's time to answer the next acquire request.
    limit: Duration,
    base: Duration,
    most: Duration,
    /// Since when no majority has answered in time, in every round that asked them all.
    silent_since: Option<Instant>,
    /// Since when a majority has been down, if it is.
    down_since: Option<Instant>,
}

impl Pace {
    fn new(req: &AcquireRequest, tuning: RedlockTuning) -> Pace {
        let base = acquire_timeout(req.ttl);
        Pace {
            tuning,
            losses: 0,
            raced: false,
            contended: false,
            limit: base,
            base,
            most: max_acquire_timeout(req.ttl, tuning.server.op_timeout),
            silent_since: None,
            down_since: None,
        }
    }

    /// Takes note of a lost round's answers.
    fn answers(&mut self, refusal: &Refusal, quorum: usize, n: usize) {
        if refusal.at_lead {
            return;
        }
        let slow = refusal.failed.len() > refusal.down;
        self.limit = if slow {
            (self.limit * 2).min(self.most)
        } else {
            self.base
        };
        if refusal.answered >= quorum {
            self.silent_since = None;
            self.down_since = None;
        } else if n - refusal.down < quorum {
            self.down_since.get_or_insert_with(Instant::now);
        } else {
            self.silent_since.get_or_insert_with(Instant::now);
        }
    }

    /// What to do after a lost round in which a majority answered or may still answer.
    fn next(&mut self, refusal: &Refusal, quorum: usize) -> Step {
        let raced = std::mem::take(&mut self.raced);
        let held = refusal.at_lead
            || refusal.answered >= quorum
                && refusal.holder.as_ref().is_some_and(|(_, n)| *n >= quorum);
        // Looking again after a back-off or a heartbeat and finding the lock held is no
        // race lost: listen. Anything else (a release that someone else won, a vote split
        // between contenders, no majority of answers in time) is a sign of contention.
        if held && !raced {
            self.contended = false;
            return Step::Listen;
        }
        self.losses += 1;
        self.contended = true;
        Step::BackOff(self.backoff())
    }

    /// The one back-off of every store ([`backoff`]) after this many losses, at most
    /// `max_backoff`.
    fn backoff(&self) -> Duration {
        backoff(self.losses).min(self.tuning.max_backoff)
    }
}

fn random_up_to(max: Duration) -> Duration {
    rand::thread_rng().gen_range(Duration::ZERO..=max)
}

/// `pause`, cut short at the deadline.
fn bounded(pause: Duration, wait: &WaitOptions) -> Duration {
    match wait.deadline {
        Some(deadline) => pause.min(deadline.saturating_duration_since(Instant::now())),
        None => pause,
    }
}

impl RedlockBackend {
    /// Subscribes to the release channel of `key` on the lead server, which every release
    /// that went through it announces; when it cannot be reached, on every other server it
    /// can reach, at once. One subscription: each release wakes each waiter once.
    /// In the plain layout nothing announces a release (applications publish nothing):
    /// the waiter polls, at most [`PLAIN_POLL_MAX`] apart.
    async fn subscribe(&self, key: &str) -> Wakeups {
        if self.plain {
            return Wakeups { subs: Vec::new() };
        }
        let what = format!("cannot wait for lock '{key}'");
        let limit = self.tuning.server.op_timeout;
        let subscribe = |b: Arc<RedisBackend>| async move { b.subscribe_released(key).await };
        let lead = &self.members[self.lead];
        if let Ok(sub) = lead.call(&what, limit, subscribe).await {
            return Wakeups { subs: vec![sub] };
        }
        let others = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.lead)
            .map(|(_, m)| m.call(&what, limit, subscribe));
        Wakeups {
            subs: join_all(others).await.into_iter().flatten().collect(),
        }
    }

    /// Tries, then waits and tries again, until granted, out of time, or cancelled.
    pub(super) async fn acquire_loop(
        &self,
        req: &AcquireRequest,
        wait: &WaitOptions,
    ) -> Result<Acquired> {
        let started = wait.since;
        let no_wait = wait.expired();
        let mut tuning = self.tuning;
        if self.plain {
            tuning.max_backoff = tuning.max_backoff.min(PLAIN_POLL_MAX);
        }
        let mut pace = Pace::new(req, tuning);
        let mut floor = 0;
        let mut wakeups: Option<Wakeups> = None;
        let mut last_gist = None;
        loop {
            if let Some(subs) = wakeups.as_mut() {
                subs.drain();
            }
            let lead = pace.contended && !wait.expired();
            // Boxed: the nested futures of a round are too deep to lay out inline.
            let round = Box::pin(self.round(req, floor, pace.limit, lead));
            let Some(round) = unless_cancelled(&wait.cancel, round).await else {
                self.give_back_cancelled(req).await;
                return Err(self.cancelled(req));
            };
            let refusal = match round {
                Round::Won(lease) => return self.won(req, lease, wait).await,
                Round::Lost(refusal) => refusal,
                Round::Conflict(held) => {
                    return Err(req.sharing.conflict(&req.key, &self.name, held))
                }
            };
            floor = floor.max(refusal.max_token);
            // Progress is what the store answered: without a majority there is no answer
            // to tell (the waiting line then says the servers are not answering).
            let answered = refusal.answered >= self.needed(req);
            if answered && last_gist.as_ref() != Some(&refusal.gist()) {
                last_gist = Some(refusal.gist());
                wait.report(&refusal.info());
            }
            pace.answers(&refusal, self.needed(req), self.members.len());
            if let Some(e) = self.give_up(req, &refusal, &pace, no_wait, wait, started) {
                return Err(e);
            }
            if wait.cancel.is_cancelled() {
                return Err(self.cancelled(req));
            }
            let Some(subs) = wakeups.as_mut() else {
                // Subscribe, then look again at once: a release that came before the
                // subscription was complete cannot be missed.
                let subscribing = Box::pin(self.subscribe(&req.key));
                let Some(subs) = unless_cancelled(&wait.cancel, subscribing).await else {
                    return Err(self.cancelled(req));
                };
                wakeups = Some(subs);
                continue;
            };
            let delay = match pace.next(&refusal, self.needed(req)) {
                Step::BackOff(delay) => delay,
                Step::Listen => {
                    if !self.listen(req, subs, &refusal, &mut pace, wait).await? {
                        wakeups = None;
                    }
                    random_up_to(self.tuning.jitter)
                }
            };
            // Past the deadline only while riding out servers that are down: back off.
            let delay = if wait.expired() {
                delay
            } else {
                bounded(delay, wait)
            };
            tokio::select! {
                _ = wait.cancel.cancelled() => return Err(self.cancelled(req)),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// The lease of a won round, given back at once if the wait was cancelled meanwhile.
    async fn won(
        &self,
        req: &AcquireRequest,
        lease: Lease,
        wait: &WaitOptions,
    ) -> Result<Acquired> {
        if wait.cancel.is_cancelled() {
            let giving_back = self.release(&req.key, &lease.owner, ReleaseMode::One);
            let _ = tokio::time::timeout(CANCEL_GRACE, giving_back).await;
            return Err(self.cancelled(req));
        }
        if !lease.reentered {
            self.modes.acquired(&req.key, &lease.owner, req.sharing);
        }
        Ok(Acquired { lease, guard: None })
    }

    /// Waits for a release to be announced, no longer than until the lease seen may
    /// expire, nor than a heartbeat; false when the subscription closed.
    async fn listen(
        &self,
        req: &AcquireRequest,
        subs: &mut Wakeups,
        refusal: &Refusal,
        pace: &mut Pace,
        wait: &WaitOptions,
    ) -> Result<bool> {
        let heartbeat = match self.plain {
            true => self.tuning.server.heartbeat.min(PLAIN_POLL_MAX),
            false => self.tuning.server.heartbeat,
        };
        let pause = refusal.retry.map_or(heartbeat, |r| r.min(heartbeat));
        match subs.wait(bounded(pause, wait), &wait.cancel).await {
            Wake::Cancelled => return Err(self.cancelled(req)),
            Wake::Closed => return Ok(false),
            Wake::Message => {
                pace.raced = true;
                pace.contended = true;
            }
            Wake::Timeout => {}
        }
        Ok(true)
    }

    /// The error to end the wait with after a lost round, if it must end: out of time, a
    /// majority down for the operation timeout, or not answering for the stall limit.
    fn give_up(
        &self,
        req: &AcquireRequest,
        refusal: &Refusal,
        pace: &Pace,
        no_wait: bool,
        wait: &WaitOptions,
        started: Instant,
    ) -> Option<Error> {
        if refusal.answered < self.needed(req) && !refusal.at_lead {
            // Ridden out as on every store: until the deadline, but at least the brief
            // ride-out (`--no-wait` too), and for `stall` without a deadline.
            let down_for = pace.down_since.map(|t| t.elapsed());
            let silent = pace
                .silent_since
                .filter(|t| t.elapsed() >= self.tuning.stall);
            let ridden_out = started.elapsed() >= BRIEF_RIDE_OUT;
            if wait.expired() && ridden_out
                || silent.is_some()
                || down_for.is_some_and(|d| d >= self.tuning.stall)
            {
                return Some(self.unreachable(req, refusal, silent));
            }
            if wait.expired() {
                return None;
            }
        }
        wait.expired().then(|| {
            let waited = (!no_wait).then(|| started.elapsed());
            self.not_obtained(req, refusal, waited)
        })
    }

    fn not_obtained(
        &self,
        req: &AcquireRequest,
        refusal: &Refusal,
        waited: Option<Duration>,
    ) -> Error {
        let n = self.members.len();
        let mut msg = match &refusal.holder {
            Some((lock, on)) => format!(
                "lock '{}' is held by {} on {on} of {n} servers of {}",
                req.key,
                lock.describe(),
                self.name
            ),
            None => format!(
                "lock '{}' could not be taken on {} of {n} servers of {}",
                req.key,
                self.needed(req),
                self.name
            ),
        };
        if let Some(note) = &refusal.note {
            msg += &format!(" ({note})");
        }
        if !refusal.failed.is_empty() {
            msg += &format!("; not answering: {}", joined(&refusal.failed));
        }
        Error::NotObtained(match waited {
            None => msg,
            Some(d) => format!("gave up after {}: {msg}", whole_ms(d)),
        })
    }

    /// No majority answered; `since`: the last time one did, when that is why the wait ends.
    fn unreachable(
        &self,
        req: &AcquireRequest,
        refusal: &Refusal,
        since: Option<Instant>,
    ) -> Error {
        let stalled = since.map_or(String::new(), |t| {
            format!(" (no majority answered for {})", whole_ms(t.elapsed()))
        });
        let counted = votes::answered(refusal.answered, self.members.len(), self.needed(req));
        Error::Unavailable(format!(
            "cannot acquire lock '{}' on {}: {counted}{stalled}: {}",
            req.key,
            self.name,
            joined(&refusal.failed)
        ))
    }

    pub(super) fn cancelled(&self, req: &AcquireRequest) -> Error {
        Error::Cancelled(
            format!(
                "cancelled while waiting for lock '{}' on {}",
                req.key, self.name
            ),
            0,
        )
    }
}

/// `d` to the millisecond, for messages.
fn whole_ms(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64))
}

/// Runs `step` unless `cancel` fires first; `None` when it did (`step` is dropped).
async fn unless_cancelled<T>(
    cancel: &CancellationToken,
    step: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        done = step => Some(done),
    }
}
