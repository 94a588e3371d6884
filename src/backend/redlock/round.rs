//! One acquire round on every server at once, the fencing tokens, and giving back what
//! did not make a majority.
//!
//! # Acquire
//!
//! 1. Note the monotonic time `T0`, then send the acquire script to **every server at
//!    once** (the futures are joined, never awaited one after another), each bounded by a
//!    short per-server timeout, [`acquire_timeout`](super::acquire_timeout) = TTL/10 clamped to 50..200 ms: a dead
//!    or frozen server costs at most that, and leaves most of the TTL as validity (a waiter
//!    whose servers answered too late allows more, up to [`max_acquire_timeout`](super::max_acquire_timeout)).
//! 2. Count the grants. With fewer than `Q`, or when the validity
//!    `TTL − (now − T0) − drift(TTL)` (see [`crate::lease::drift`]) is not positive, take
//!    every grant back, on all servers at once (including servers that did not answer in
//!    time, which may have granted), and retry or wait.
//! 3. Otherwise the lease is ours with `Lease::sent_at = T0`: `exec`'s kill schedule, which
//!    counts from `sent_at`, never outlives the grant on any server of the majority.
//!
//! Re-entry (`DLOCK_OWNER` of an enclosing holder) works per server as on one server, and
//! counts when a majority re-entered for the same owner.
//!
//! # Fencing tokens
//!
//! Each server keeps its own counter (`dlock:{K}:fence`, never deleted). An acquisition:
//!
//! * sends a *floor*, the highest token it has seen in earlier refusals; a server raises its
//!   counter to the floor, then `INCR`s it, and grants with that value;
//! * takes `t` = the largest value among its grants (a majority of them);
//! * when a server that answered did not grant with `t` (it restarted empty, missed
//!   acquisitions while it was down, or refused because someone else holds the key there),
//!   a second round raises the counter of each such server to `t` and, where the caller
//!   holds the lease, stamps `t` on it (`fence.lua`); a majority must then hold the lease
//!   stamped `t`, or the attempt is given back. In the common case every server granted
//!   with the same value and this round is skipped.
//!
//! So when an acquisition A returns `t_A`, every server of a set `C_A` — all that granted or
//! were raised, at least `Q` of them — has a counter of at least `t_A`, and a majority of
//! them got it while A held the lease there.
//!
//! **Guaranteed** (no assumption about clocks or pauses): if acquisition B starts after
//! acquisition A returned, then `t_B > t_A`, as long as at least `N − Q + 1` servers of
//! `C_A` keep their counter (are not restarted without persistence) until B's grant: every
//! majority then meets one of them, whose `INCR` gives more than `t_A`. An acquisition that
//! reached all `N` servers (the usual case) tolerates `N − Q` such restarts before the next
//! acquisition; one that reached only `Q` tolerates none. The next acquisition that reaches
//! a restarted server raises its counter again.
//!
//! **Under the Redlock timing assumptions** (see `backend.rs`), holders' validity windows do not
//! overlap, and tokens increase in the order of those windows.
//!
//! **Not guaranteed**: that a token is never *reused* after data loss beyond the above, nor
//! that tokens are consecutive.
//!
//! **In the plain layout** each server's counter is `dlock:plain:{T}:K:fence` beside the
//! application's key, raised and stamped the same way (`plain/fence.lua`), so the above
//! holds among dlock's holders. Applications taking K (node `redlock`, redis-py) bump no
//! counter and carry no token: a token orders dlock's holders of K only, and says nothing
//! about an application that held K between two of them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::backend::RedlockBackend;
use super::member::Member;
use crate::backend::quorum::round::{self, Failure};
use crate::backend::quorum::votes::{self, Answer, Decision, GiveBack, Tally};
use crate::backend::redis::{Busy, Tried, Vote};
use crate::backend::{
    AcquireRequest, Lease, LockInfo, ReleaseMode, Sharing, WaitInfo, CANCEL_GRACE,
};
use crate::error::Error;

/// What one acquire round ended with.
// One per attempt, moved once and matched at once: boxing the larger variant would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Round {
    Won(Lease),
    Lost(Refusal),
    /// A server holds the key in a way the caller must not join nor wait for (a semaphore
    /// of another N, or readers and writers beside a semaphore): how they hold it. Every
    /// grant of the round was given back.
    Conflict(Sharing),
}

/// What a lost round learned.
#[derive(Default)]
pub(super) struct Refusal {
    /// The owner seen on most servers, its lock, and on how many servers.
    pub(super) holder: Option<(LockInfo, usize)>,
    /// When the lease seen may expire (smallest TTL reported).
    pub(super) retry: Option<Duration>,
    /// The highest fencing token seen: the floor of the next round.
    pub(super) max_token: u64,
    /// Servers that answered.
    pub(super) answered: usize,
    /// Why servers failed, one message each (naming the server).
    pub(super) failed: Vec<Error>,
    /// How many of them are down (the others did not answer in time).
    pub(super) down: usize,
    /// A reason beyond the counts (validity used up, tokens not confirmed).
    pub(super) note: Option<String>,
    /// Only the lead server was asked, and it refused.
    pub(super) at_lead: bool,
}

impl Refusal {
    /// What a lost round's answers tell the waiter.
    fn lost(tally: Tally<Error>, note: Option<String>) -> Refusal {
        Refusal {
            holder: tally.holder,
            retry: tally.retry,
            max_token: tally.max_token,
            answered: tally.answered,
            failed: tally.failed,
            down: tally.down,
            note,
            at_lead: false,
        }
    }

    /// The lead server refused: it alone was asked.
    pub(super) fn at_lead(busy: Busy, floor: u64) -> Refusal {
        let token = busy.holder.as_ref().map_or(0, |l| l.fencing_token);
        Refusal {
            holder: busy.holder.map(|lock| (lock, 1)),
            retry: busy.retry,
            max_token: floor.max(token),
            answered: 1,
            at_lead: true,
            ..Refusal::default()
        }
    }

    pub(super) fn info(&self) -> WaitInfo {
        WaitInfo {
            holder: self.holder.as_ref().map(|(lock, _)| lock.clone()),
            position: None,
            waiters: None,
        }
    }

    pub(super) fn gist(&self) -> Option<(String, u64)> {
        self.holder
            .as_ref()
            .map(|(lock, _)| (lock.owner.clone(), lock.fencing_token))
    }
}

/// Takes back whatever an acquire round may have been granted if the round is dropped
/// half-way (its future cancelled): servers are told from a spawned task.
struct RoundGuard {
    members: Vec<Arc<Member>>,
    key: String,
    owner: String,
    limit: Duration,
    armed: bool,
}

impl Drop for RoundGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let members = std::mem::take(&mut self.members);
        let (key, owner, limit) = (self.key.clone(), self.owner.clone(), self.limit);
        runtime.spawn(async move {
            let (key, owner) = (&key, &owner);
            let undo = members.iter().map(|m| {
                m.call("take back", limit, |b| async move {
                    b.take_back(key, owner, ReleaseMode::All).await
                })
            });
            join_all(undo).await;
        });
    }
}

impl RedlockBackend {
    /// One acquire round on every server at once (see the module documentation).
    /// With `lead`, the lead server is asked first, and the round ends there if it refuses.
    pub(super) async fn round(
        &self,
        req: &AcquireRequest,
        floor: u64,
        limit: Duration,
        lead: bool,
    ) -> Round {
        let mut guard = RoundGuard {
            members: self.members.clone(),
            key: req.key.clone(),
            owner: req.owner.clone(),
            limit,
            armed: true,
        };
        let sent_at = Instant::now();
        let replies = match self.ask(req, floor, limit, lead).await {
            Ok(replies) => replies,
            Err(refusal) => {
                guard.armed = false;
                return Round::Lost(refusal);
            }
        };
        if let Some(held) = conflict(&replies) {
            self.take_back(req, &round::everywhere(self.members.len()), limit)
                .await;
            guard.armed = false;
            return Round::Conflict(held);
        }
        let tally = votes::tally(replies.into_iter().map(Answer::from), floor);
        let mut note = None;
        let won = match votes::decide(&tally, self.needed(req)) {
            Decision::Granted { token } => {
                if self.confirm(req, token, &tally, limit).await {
                    Some(Decision::Granted { token })
                } else {
                    note = Some("the servers' fencing counters could not be aligned".into());
                    None
                }
            }
            Decision::Lost => None,
            reentered => Some(reentered),
        };
        let valid = won
            .is_some()
            .then(|| votes::validity(req.ttl, sent_at.elapsed()));
        let lease = match (won, valid) {
            (Some(won), Some(Some(validity))) => Some((won, validity)),
            (_, Some(None)) => {
                note = Some(no_validity(req.ttl, sent_at.elapsed()));
                None
            }
            _ => None,
        };
        // Won: the grants beside the majority go back (fresh grants where a majority
        // re-entered, or re-entries where a majority granted afresh). Lost: every grant,
        // and anything a server that did not answer may have granted, everywhere at once.
        let back = votes::settle(&tally, lease.as_ref().map(|(won, _)| won));
        self.take_back(req, &back, limit).await;
        guard.armed = false;
        let winner = lease.and_then(|(won, validity)| Some((won.winner(&req.owner)?, validity)));
        match winner {
            Some(((owner, token, reentered), validity)) => Round::Won(
                Lease::timed(&req.key, owner, token, req.ttl, reentered, sent_at)
                    .expiring_in(validity),
            ),
            None => Round::Lost(Refusal::lost(tally, note)),
        }
    }

    /// Sends the acquire request to every server at once; with `lead`, to the lead server
    /// first and to the others only if it did not refuse. Contenders that heard the same
    /// release then meet on one server, which grants one of them, instead of splitting the
    /// servers between them. `Err`: the lead refused, and nothing was granted anywhere.
    async fn ask(
        &self,
        req: &AcquireRequest,
        floor: u64,
        limit: Duration,
        lead: bool,
    ) -> Result<Vec<Result<Vote, Failure>>, Refusal> {
        let what = format!("cannot acquire lock '{}'", req.key);
        let what = &what;
        let ask =
            |i: usize| {
                self.members[i].call_within(what, limit, |b| async move {
                    b.try_grant(req, floor).await
                })
            };
        let mut first = None;
        if lead {
            match ask(self.lead).await {
                Ok(Vote::Tried(Tried::Busy(busy))) => return Err(Refusal::at_lead(busy, floor)),
                reply => first = Some(reply),
            }
        }
        let rest: Vec<usize> = (0..self.members.len())
            .filter(|&i| !(lead && i == self.lead))
            .collect();
        let mut replies = join_all(rest.iter().map(|&i| ask(i))).await;
        if let Some(reply) = first {
            replies.insert(self.lead, reply);
        }
        Ok(replies)
    }

    /// Aligns the fencing counters on `token`, the largest of the fresh grants (see
    /// [`round::confirm`]): stamped with `fence.lua`.
    async fn confirm(
        &self,
        req: &AcquireRequest,
        token: u64,
        tally: &Tally<Error>,
        limit: Duration,
    ) -> bool {
        let what = format!("cannot acquire lock '{}'", req.key);
        let (what, key, owner) = (&what, &req.key, &req.owner);
        round::confirm(tally, token, self.needed(req), |i| async move {
            let stamp = self.members[i].call(what, limit, |b| async move {
                b.confirm_token(key, owner, token).await
            });
            matches!(stamp.await, Ok(true))
        })
        .await
    }

    /// Takes back what `back` names, on all its servers at once and waking nobody.
    async fn take_back(&self, req: &AcquireRequest, back: &GiveBack, limit: Duration) {
        let key = &req.key;
        round::take_back(&req.owner, back, |i, owner, mode| {
            self.members[i].call("take back", limit, move |b| async move {
                b.take_back(key, owner, mode).await
            })
        })
        .await;
    }

    /// Takes back, on every server, whatever a round cut short by a cancel may have been
    /// granted; sent on the connections the round used, so a server that answers late runs
    /// it after the grant. Bounded by [`CANCEL_GRACE`]: a signal ends the wait at once.
    pub(super) async fn give_back_cancelled(&self, req: &AcquireRequest) {
        let all = round::everywhere(self.members.len());
        let giving_back = self.take_back(req, &all, CANCEL_GRACE);
        let _ = tokio::time::timeout(CANCEL_GRACE, giving_back).await;
    }
}

/// How the holders hold the key where a server refused the caller's sharing outright.
fn conflict(replies: &[Result<Vote, Failure>]) -> Option<Sharing> {
    replies.iter().find_map(|r| match r {
        Ok(Vote::Conflict(held)) => Some(*held),
        _ => None,
    })
}

impl From<Result<Vote, Failure>> for Answer<Error> {
    fn from(reply: Result<Vote, Failure>) -> Answer<Error> {
        match reply {
            Ok(Vote::Tried(Tried::Granted(lease))) => Answer::Granted(lease),
            Ok(Vote::Tried(Tried::Busy(busy))) => Answer::Busy(busy),
            // Sorted out before the count (see `conflict`).
            Ok(Vote::Conflict(_)) => Answer::Busy(Busy::default()),
            Err(failure) => failure.into(),
        }
    }
}

/// Why a round that a majority granted is lost all the same.
fn no_validity(ttl: Duration, took: Duration) -> String {
    format!(
        "acquiring took {} of a {} lease, leaving no validity",
        humantime::format_duration(Duration::from_millis(took.as_millis() as u64)),
        humantime::format_duration(ttl)
    )
}
