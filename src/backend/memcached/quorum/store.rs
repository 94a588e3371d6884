//! The memcached quorum as a [`LockStore`]: no queue and no notifications, so waiters
//! poll with the seam's jittered back-off, and a freed lock goes to whichever waiter
//! looks first (no fairness), as on one memcached.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::join_all;

use super::member::Member;
use crate::backend::memcached::client::Tuning;
use crate::backend::memcached::store::MemcachedStore;
use crate::backend::memcached::ttl;
use crate::backend::memcached::url::Target;
use crate::backend::quorum::modes::Modes;
use crate::backend::quorum::renew::{self, Renewal};
use crate::backend::quorum::{outcome, votes};
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::waiting::Holds;
use crate::backend::{
    now_ms, AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
    Sharing,
};
use crate::error::{Error, Result};

/// How long one server may take to answer a release, status or run-record request.
pub(super) const OP_LIMIT: Duration = Duration::from_secs(1);

/// A majority quorum of independent memcached servers (see the module documentation).
pub struct MemcachedQuorum {
    pub(super) members: Vec<Arc<Member>>,
    pub(super) quorum: usize,
    pub(super) name: String,
    /// How the holders this process acquired hold their keys (their renewal quorum).
    pub(super) modes: Modes,
}

/// One acquisition: whether a round may have granted without our hearing of it, and the
/// highest token seen so far (the next round's tokens must exceed it).
#[derive(Default)]
pub struct QuorumWaiter {
    pub(super) in_flight: bool,
    pub(super) floor: u64,
    pub(super) holds: Holds,
}

impl MemcachedQuorum {
    /// A quorum of the servers `targets` name; connects on first use. Two servers at
    /// least, each named once.
    pub fn open(targets: &[Target], tuning: Tuning) -> Result<MemcachedQuorum> {
        if targets.len() < 2 {
            return Err(Error::Usage(
                "a memcached quorum needs at least two servers (three or more, an odd number, to survive a failure)".into(),
            ));
        }
        for (i, t) in targets.iter().enumerate() {
            if targets[..i].iter().any(|o| o.addr == t.addr) {
                return Err(Error::Usage(format!(
                    "{} is given twice: a memcached quorum needs independent servers, each named once",
                    t.name
                )));
            }
        }
        let members: Vec<Arc<Member>> = targets
            .iter()
            .map(|t| Arc::new(Member::new(MemcachedStore::open(t, tuning))))
            .collect();
        let shown: Vec<&str> = members.iter().map(|m| m.shown.as_str()).collect();
        Ok(MemcachedQuorum {
            name: format!("memcached-quorum({})", shown.join(",")),
            quorum: votes::quorum(members.len()),
            members,
            modes: Modes::default(),
        })
    }

    /// How many servers must grant or renew for a holder sharing as `sharing`.
    pub(super) fn needed(&self, sharing: Sharing) -> usize {
        votes::quorum_for(self.members.len(), sharing)
    }

    /// One renewal sent to every server at once (see [`renew::on_quorum`]).
    async fn renew_on_quorum(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let secs = self.whole(ttl, key)?;
        let limit = crate::backend::quorum::renew::renew_timeout(secs);
        let what = format!("cannot renew lock '{key}'");
        let (what, members) = (&what, &self.members);
        let round = move |needed| {
            let sent = Instant::now();
            let calls = members
                .iter()
                .map(|m| {
                    let (k, o) = (key.to_string(), owner.to_string());
                    m.ask(what, limit, move |s| async move {
                        s.renew_lease(&k, &o, secs).await
                    })
                })
                .collect();
            // An item may expire a second early: the lease counts from a second before.
            async move {
                (
                    outcome::gather_renewals(calls, needed).await,
                    ttl::granted_at(sent),
                )
            }
        };
        let at = Renewal {
            name: &self.name,
            key,
            owner,
            ttl: secs,
            servers: members.len(),
        };
        let status = || async move { self.status(&[key.to_string()]).await };
        renew::on_quorum(at, &self.modes, round, status).await
    }

    /// The servers' names, in order.
    fn servers(&self) -> Vec<String> {
        self.members.iter().map(|m| m.shown.clone()).collect()
    }

    /// The TTL sent for a lease of `ttl` (whole seconds, 3 s to 30 days), as a duration.
    pub(super) fn whole(&self, ttl: Duration, key: &str) -> Result<Duration> {
        ttl::seconds(ttl, key, &self.name).map(Duration::from_secs)
    }
}

#[async_trait]
impl LockStore for MemcachedQuorum {
    type Waiter = QuorumWaiter;

    fn describe(&self) -> String {
        self.name.clone()
    }

    /// Every sharing: each server keeps its holders as one memcached does, and a grant
    /// needs as many servers as the sharing asks ([`votes::quorum_for`]).
    fn supports(&self, _sharing: Sharing) -> bool {
        true
    }

    fn queue_order(&self) -> Option<&'static str> {
        Some(crate::backend::ORDER_NONE)
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<QuorumWaiter> {
        crate::backend::memcached::keys::Keys::of(&req.key, &self.name)?;
        self.whole(req.ttl, &req.key)?;
        Ok(QuorumWaiter::default())
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut QuorumWaiter,
        _enqueue: bool,
    ) -> Result<Attempt> {
        w.in_flight = true;
        let attempt = self.round(req, &mut w.floor).await;
        w.in_flight = false;
        attempt
    }

    /// As one memcached: the back-off bounded by the holds seen (see its store).
    async fn sleep(
        &self,
        _req: &AcquireRequest,
        w: &mut QuorumWaiter,
        busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        Ok(w.holds.nap(busy, round, pause).await)
    }

    async fn leave(&self, req: &AcquireRequest, w: QuorumWaiter) {
        if w.in_flight {
            self.give_back_everywhere(req).await;
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_on_quorum(key, owner, ttl).await
    }

    /// Held on every server (a majority must keep it), rounded up as on one memcached.
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let (key, owner) = (&acquired.lease.key, &acquired.lease.owner);
        let what = format!("cannot leave lock '{key}' held");
        let ttl = (left + ttl::EARLY).max(ttl::MIN_TTL);
        let until = now_ms() + ttl.as_millis() as u64;
        let replies = join_all(self.members.iter().map(|m| {
            let (k, o) = (key.clone(), owner.clone());
            m.ask(&what, OP_LIMIT, move |s| async move {
                s.hold_until(&k, &o, ttl, until).await
            })
        }))
        .await;
        outcome::done_on_majority(&what, &self.name, replies, self.quorum)
    }

    /// Each server is connected on its first request: connect them now; a majority must
    /// answer, as for any request.
    async fn ready(&self, key: &str) -> Result<()> {
        let replies = join_all(self.members.iter().map(|m| {
            let k = key.to_string();
            m.ask("cannot connect", OP_LIMIT, move |s| async move {
                LockStore::ready(s.as_ref(), &k).await
            })
        }))
        .await;
        let n = replies.len();
        let errors: Vec<Error> = replies.into_iter().filter_map(Result::err).collect();
        if n - errors.len() >= self.quorum {
            return Ok(());
        }
        let msg = format!(
            "lock '{key}': {}: cannot reach a majority: {}: {}",
            self.name,
            votes::answered(n - errors.len(), n, self.quorum),
            outcome::joined(&errors)
        );
        Err(outcome::short_of_majority(&errors, msg))
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        if mode != ReleaseMode::Force {
            self.modes.released(key, owner);
        }
        let what = format!("cannot release lock '{key}'");
        let replies = join_all(self.members.iter().map(|m| {
            let (k, o) = (key.to_string(), owner.to_string());
            m.ask(&what, OP_LIMIT, move |s| async move {
                s.release_lease(&k, &o, mode).await
            })
        }))
        .await;
        outcome::released(&self.name, key, replies, self.quorum)
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let replies = join_all(self.members.iter().map(|m| {
            let keys = keys.to_vec();
            m.ask("cannot read lock status", OP_LIMIT, move |s| async move {
                s.read_status(&keys).await
            })
        }))
        .await;
        outcome::status(&self.name, &self.servers(), keys, replies, self.quorum)
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        let replies = join_all(self.members.iter().map(|m| {
            let (k, run) = (key.to_string(), run.clone());
            m.ask("cannot record the run", OP_LIMIT, move |s| async move {
                s.keep_run(&k, &run).await
            })
        }))
        .await;
        outcome::run_kept(&self.name, key, replies, self.quorum)
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        let replies = join_all(self.members.iter().map(|m| {
            let k = key.to_string();
            m.ask("cannot read the last run", OP_LIMIT, move |s| async move {
                s.read_runs(&k).await
            })
        }))
        .await;
        outcome::newest_runs(&self.name, key, replies, self.quorum)
    }
}
