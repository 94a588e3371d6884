//! One acquire round on every server at once, the fencing tokens, and giving back what
//! did not make a majority. The votes are counted by [`votes`], as for Redlock.
//!
//! # Acquire
//!
//! Every server is asked at once (add, then its counter's next value written into the
//! lease), each within [`acquire_limit`]. The round is won when a majority (for a
//! semaphore more, [`votes::quorum_for`]) granted (or
//! re-entered for one enclosing holder) and validity is left: `TTL − 1 s − elapsed −
//! drift`. Otherwise every grant is given back at once, on the servers that did not
//! answer in time too (they may have granted).
//!
//! # Fencing tokens
//!
//! The token `t` is the largest value among the grants, raised above every token seen
//! (earlier refusals, the last-run records, what this process handed out). Every server
//! that answered with less (a counter recreated lower, a refusal, a re-entry for
//! another owner) has its counter raised to `t`, and where the caller holds the lease
//! there, `t` is stamped on it; a majority must hold the lease stamped `t`, or the round
//! is given back. So when an acquisition returns `t`, a majority of the servers have a
//! counter of `t` at least, and the next acquisition's majority meets one of them: its
//! token is larger, as long as a majority keeps its counters. A server that restarted
//! empty recreates its counter from the clock in microseconds (above the tokens it had
//! handed out), and is raised again by the next acquisition that reaches it.

use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::member::OnSuspect;
use super::store::MemcachedQuorum;
use crate::backend::memcached::{fence, ttl};
use crate::backend::quorum::outcome::{joined, short_of_majority};
use crate::backend::quorum::round::{self, Failure};
use crate::backend::quorum::votes::{self, Answer, Decision, GiveBack, Tally};
use crate::backend::store::{Attempt, Busy};
use crate::backend::{AcquireRequest, Acquired, Lease, CANCEL_GRACE};
use crate::error::{Error, Result};

/// How long one server may take to answer an acquire request for a lease of `ttl`:
/// TTL/10, 250 to 500 ms (several round trips; a frozen server must not eat the lease).
pub fn acquire_limit(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(250), Duration::from_millis(500))
}

impl MemcachedQuorum {
    /// One round; `floor` is the highest token seen so far, raised by what this round saw.
    pub(super) async fn round(&self, req: &AcquireRequest, floor: &mut u64) -> Result<Attempt> {
        let secs = self.whole(req.ttl, &req.key)?;
        let limit = acquire_limit(secs);
        let what = format!("cannot acquire lock '{}'", req.key);
        let sent = Instant::now();
        let replies = join_all(self.members.iter().map(|m| {
            let req = req.clone();
            m.call(&what, limit, OnSuspect::Skip, move |s| async move {
                s.take_for_quorum(&req).await
            })
        }))
        .await;
        if let Some(e) = conflict(&replies) {
            self.give_back_everywhere(req).await;
            return Err(e);
        }
        let high = (*floor).max(fence::highest_seen(&self.name, &req.key));
        let mut run_floor = 0;
        let answers = replies.into_iter().map(|reply| match reply {
            Ok((Attempt::Granted(acquired), runs)) => {
                run_floor = run_floor.max(runs);
                Answer::Granted(acquired.lease)
            }
            Ok((Attempt::Busy(busy), _)) => Answer::Busy(busy),
            Err(failure) => failure.into(),
        });
        let answers: Vec<Answer<Error>> = answers.collect();
        let tally = votes::tally(answers, high.max(run_floor));
        *floor = tally.max_token;
        let (won, mut note) = self.decide(req, &tally, limit).await;
        let validity = won
            .as_ref()
            .and_then(|_| votes::validity(secs - ttl::EARLY, sent.elapsed()));
        if won.is_some() && validity.is_none() {
            note = Some(format!(
                "acquiring took {} of a {} lease (less the second memcached may expire it early), leaving no validity",
                humantime::format_duration(Duration::from_millis(sent.elapsed().as_millis() as u64)),
                humantime::format_duration(secs)
            ));
        }
        let won = won.filter(|_| validity.is_some());
        let back = votes::settle(&tally, won.as_ref());
        self.take_back(req, &back, limit).await;
        if let (Some(won), Some(validity)) = (won, validity) {
            let (owner, token, reentered) = won.winner(&req.owner).expect("won");
            if !reentered {
                fence::saw(&self.name, &req.key, token);
                self.modes.acquired(&req.key, &owner, req.sharing);
            }
            let sent_at = ttl::granted_at(sent);
            let lease = Lease::timed(&req.key, owner, token, secs, reentered, sent_at)
                .expiring_in(validity);
            return Ok(Attempt::Granted(Acquired { lease, guard: None }));
        }
        self.lost(req, tally, note)
    }

    /// What a round's answers decide, its fresh grants' token aligned on the servers;
    /// with a note when a majority granted an exclusive caller but the tokens could not be
    /// aligned.
    async fn decide(
        &self,
        req: &AcquireRequest,
        tally: &Tally<Error>,
        limit: Duration,
    ) -> (Option<Decision>, Option<String>) {
        match votes::decide(tally, self.needed(req.sharing)) {
            Decision::Granted { token } => {
                // Above every token seen, not only above the grants.
                let token = if tally.max_token > token {
                    tally.max_token + 1
                } else {
                    token
                };
                if self.confirm(req, token, tally, limit).await {
                    return (Some(Decision::Granted { token }), None);
                }
                // Beside other holders, the token may be one another holder has on a
                // server: a race, tried again like a refusal.
                let note = req.sharing.is_exclusive();
                let note = note.then_some("the servers' fencing counters could not be aligned");
                (None, note.map(String::from))
            }
            Decision::Lost => (None, None),
            reentered => (Some(reentered), None),
        }
    }

    /// A lost round: refused by a majority (busy), or an error when no majority
    /// answered or the round was won too late to be used.
    fn lost(
        &self,
        req: &AcquireRequest,
        tally: Tally<Error>,
        note: Option<String>,
    ) -> Result<Attempt> {
        let (n, needed) = (self.members.len(), self.needed(req.sharing));
        if tally.answered < needed || note.is_some() {
            let why = note.unwrap_or_else(|| votes::answered(tally.answered, n, needed));
            let failed = if tally.failed.is_empty() {
                String::new()
            } else {
                format!(": {}", joined(&tally.failed))
            };
            let msg = format!(
                "cannot acquire lock '{}' on {}: {why}{failed}",
                req.key, self.name
            );
            return Err(short_of_majority(&tally.failed, msg));
        }
        Ok(Attempt::Busy(Busy {
            holder: tally.holder.map(|(lock, _)| lock),
            retry: tally.retry,
            ..Busy::default()
        }))
    }

    /// Aligns the fencing counters on `token` (see [`round::confirm`]): skipped on a
    /// suspect server.
    async fn confirm(
        &self,
        req: &AcquireRequest,
        token: u64,
        tally: &Tally<Error>,
        limit: Duration,
    ) -> bool {
        let what = format!("cannot acquire lock '{}'", req.key);
        let what = &what;
        round::confirm(tally, token, self.needed(req.sharing), |i| {
            let (k, o) = (req.key.clone(), req.owner.clone());
            let stamp = self.members[i].call(what, limit, OnSuspect::Skip, move |s| async move {
                s.raise(&k, &o, token).await
            });
            async move { matches!(stamp.await, Ok(true)) }
        })
        .await
    }

    /// Takes back what `back` names, on all its servers at once.
    async fn take_back(&self, req: &AcquireRequest, back: &GiveBack, limit: Duration) {
        round::take_back(&req.owner, back, |i, owner, mode| {
            let (key, owner) = (req.key.clone(), owner.to_string());
            self.members[i].call(
                "take back",
                limit,
                OnSuspect::Background,
                move |s| async move { s.take_back(&key, &owner, mode).await },
            )
        })
        .await;
    }

    /// Takes back, on every server, whatever a round cut short may have been granted.
    /// Bounded by [`CANCEL_GRACE`]: a signal ends the wait at once.
    pub(super) async fn give_back_everywhere(&self, req: &AcquireRequest) {
        let all = round::everywhere(self.members.len());
        let giving_back = self.take_back(req, &all, CANCEL_GRACE);
        let _ = tokio::time::timeout(CANCEL_GRACE, giving_back).await;
    }
}

/// A server's refusal of the caller's sharing (a semaphore of another N, or readers and
/// writers beside a semaphore): the whole attempt is refused, in that server's words.
fn conflict<T>(replies: &[std::result::Result<T, Failure>]) -> Option<Error> {
    replies.iter().find_map(|r| match r {
        Err(Failure::Down(Error::Usage(msg))) => Some(Error::Usage(msg.clone())),
        _ => None,
    })
}
