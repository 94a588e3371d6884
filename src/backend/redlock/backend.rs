//! The Redlock backend value: connecting to the quorum, renew, release and status (the
//! acquire round is `round.rs`, the waiting `wait.rs`).
//!
//! # Renew and release
//!
//! Renew goes to every server at once and succeeds when a majority renewed, with the
//! validity measured from when the requests were sent. `NotOwner` when a majority
//! definitely says the caller is not the owner (then `exec` kills at once), `Unavailable`
//! when no majority can be reached (then `exec` retries on its schedule and kills before
//! the lease can expire). Release goes to every server at once.
//!
//! # Safety of the lock itself, and its limits
//!
//! Mutual exclusion rests on (as in the Redlock spec and the Kleppmann/antirez debate):
//!
//! * bounded clock *rate* drift between client and servers (the `drift` allowance, 1% + 2
//!   ms); no wall-clock jumps on the servers (Redis expires keys by its wall clock: use NTP
//!   slewing, never stepping);
//! * no process pause longer than the margins: `exec` kills the command before
//!   `sent_at + TTL − drift`, but a paused `dlock` cannot kill anything — that is what
//!   fencing tokens are for;
//! * **the restart rule**: a server that lost its data (restart without persistence, or with
//!   `appendfsync everysec` and a crash) must not rejoin until the longest TTL in use has
//!   passed ("delayed restart"), or must run with `appendonly yes` and
//!   `appendfsync always`. Otherwise it may grant a key that the other servers still hold
//!   for someone else, and two clients each see a majority. With the rule, a restarted
//!   server can grant only keys whose leases have expired everywhere.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::member::{joined, same_server_twice, Member, State};
use super::{quorum, renew_timeout, RedlockTuning};
use crate::backend::quorum::votes::{self, Verdict};
use crate::backend::redis::RedisBackend;
use crate::backend::{
    now_ms, AcquireRequest, Acquired, Backend, KeyStatus, Lease, LockInfo, ReleaseMode, Released,
    WaitOptions,
};
use crate::config::redact_url;
use crate::error::{Error, Result};

/// A quorum of independent Redis servers (see the module documentation).
pub struct RedlockBackend {
    pub(super) members: Vec<Arc<Member>>,
    /// The server contending waiters ask first: the same for every client given the same
    /// servers in any order (the smallest URL).
    pub(super) lead: usize,
    pub(super) quorum: usize,
    pub(super) tuning: RedlockTuning,
    pub(super) name: String,
}

impl RedlockBackend {
    /// Connects to every server at once with the default [`RedlockTuning`].
    pub async fn connect(urls: &[String]) -> Result<RedlockBackend> {
        Self::connect_with(urls, RedlockTuning::default()).await
    }

    /// Connects to every server at once. Fails (`Unavailable`, naming every server that
    /// failed) when fewer than a majority answer; servers that did not answer are retried in
    /// the background later.
    pub async fn connect_with(urls: &[String], tuning: RedlockTuning) -> Result<RedlockBackend> {
        if urls.len() < 2 {
            return Err(Error::Usage(
                "Redlock needs at least two Redis servers (three or more, an odd number, to survive a failure)".into(),
            ));
        }
        let connecting = urls
            .iter()
            .map(|url| RedisBackend::connect_with(url, tuning.server));
        let results = join_all(connecting).await;
        let mut members = Vec::with_capacity(urls.len());
        let mut failed = Vec::new();
        for (url, result) in urls.iter().zip(results) {
            let state = match result {
                Ok(b) => State::Up(Arc::new(b)),
                Err(e @ Error::Usage(_)) => return Err(e),
                Err(e) => {
                    let state = State::Down {
                        error: e.to_string(),
                        retry_at: Instant::now() + tuning.reconnect_every,
                        connecting: false,
                    };
                    failed.push(e);
                    state
                }
            };
            members.push(Arc::new(Member {
                url: url.clone(),
                shown: redact_url(url),
                tuning,
                state: Mutex::new(state),
            }));
        }
        same_server_twice(&members).await?;
        let shown: Vec<&str> = members.iter().map(|m| m.shown.as_str()).collect();
        let lead = (0..members.len())
            .min_by_key(|&i| &members[i].shown)
            .unwrap_or(0);
        let backend = RedlockBackend {
            lead,
            quorum: quorum(urls.len()),
            tuning,
            name: format!("redlock({})", shown.join(",")),
            members,
        };
        let up = urls.len() - failed.len();
        if up < backend.quorum {
            return Err(Error::Unavailable(format!(
                "{}: cannot reach a majority: {}: {}",
                backend.name,
                votes::answered(up, urls.len(), backend.quorum),
                joined(&failed)
            )));
        }
        Ok(backend)
    }

    /// How many servers make a majority.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Runs `op` on every server at once, each within `limit`; results in server order.
    pub(super) async fn on_all<T, Fut>(
        &self,
        what: &str,
        limit: Duration,
        op: impl Fn(Arc<RedisBackend>) -> Fut,
    ) -> Vec<Result<T>>
    where
        Fut: Future<Output = Result<T>>,
    {
        join_all(self.members.iter().map(|m| m.call(what, limit, &op))).await
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn acquire(&self, req: &AcquireRequest, wait: &WaitOptions) -> Result<Acquired> {
        if wait.cancel.is_cancelled() {
            return Err(self.cancelled(req));
        }
        self.acquire_loop(req, wait).await
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let limit = renew_timeout(ttl);
        let what = format!("cannot renew lock '{key}'");
        let n = self.members.len();
        let sent_at = Instant::now();
        let mut pending: FuturesUnordered<_> = self
            .members
            .iter()
            .map(|m| {
                m.call(
                    &what,
                    limit,
                    |b| async move { b.renew(key, owner, ttl).await },
                )
            })
            .collect();
        let (mut renewed, mut refused, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        // Stop as soon as the outcome is known: a dead server does not slow a renewal down.
        while let Some(reply) = pending.next().await {
            match reply {
                Ok(lease) => renewed.push(lease),
                Err(e @ Error::NotOwner(_)) => refused.push(e),
                Err(e) => failed.push(e),
            }
            if votes::settled(renewed.len(), refused.len(), failed.len(), n, self.quorum) {
                break;
            }
        }
        drop(pending);
        let verdict = votes::verdict(renewed.len(), refused.len(), self.quorum);
        if verdict == Verdict::Done {
            let Some(validity) = votes::validity(ttl, sent_at.elapsed()) else {
                return Err(Error::Unavailable(format!(
                    "cannot renew lock '{key}' on {}: the servers answered too late for the lease to be valid",
                    self.name
                )));
            };
            return Ok(Lease {
                key: key.to_string(),
                owner: owner.to_string(),
                fencing_token: renewed.iter().map(|l| l.fencing_token).max().unwrap_or(0),
                ttl,
                reentered: false,
                sent_at,
                bound: false,
                expires_at_ms: now_ms() + validity.as_millis() as u64,
            });
        }
        let errors: Vec<Error> = refused.into_iter().chain(failed).collect();
        let msg = format!(
            "cannot renew lock '{key}' on {}: {}: {}",
            self.name,
            votes::done_on("renewed", renewed.len(), n, self.quorum),
            joined(&errors)
        );
        Err(refusal(verdict, msg))
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let what = format!("cannot release lock '{key}'");
        let limit = self.tuning.server.op_timeout;
        let replies = self
            .on_all(&what, limit, |b| async move {
                b.release(key, owner, mode).await
            })
            .await;
        let n = replies.len();
        let (mut released, mut errors) = (Vec::new(), Vec::new());
        for reply in replies {
            match reply {
                Ok(r) => released.push(r),
                Err(e) => errors.push(e),
            }
        }
        let refused = errors
            .iter()
            .filter(|e| matches!(e, Error::NotOwner(_)))
            .count();
        let verdict = votes::verdict(released.len(), refused, self.quorum);
        if verdict == Verdict::Done {
            let owners = released.iter().filter_map(|r| r.previous_owner.as_deref());
            let previous_owner = votes::most_named(owners).map(str::to_string);
            let still = released.iter().filter(|r| r.still_held).count();
            return Ok(Released {
                previous_owner,
                still_held: still >= self.quorum,
            });
        }
        let msg = format!(
            "cannot release lock '{key}' on {}: {}: {}",
            self.name,
            votes::done_on("released", released.len(), n, self.quorum),
            joined(&errors)
        );
        Err(refusal(verdict, msg))
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let limit = self.tuning.server.op_timeout;
        let replies = self
            .on_all("cannot read lock status", limit, |b| async move {
                b.status(keys).await
            })
            .await;
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        if answered < self.quorum {
            let errors: Vec<Error> = replies.into_iter().filter_map(Result::err).collect();
            return Err(Error::Unavailable(format!(
                "cannot read lock status on {}: {}: {}",
                self.name,
                votes::answered(answered, self.members.len(), self.quorum),
                joined(&errors)
            )));
        }
        let views: Vec<Result<HashMap<String, LockInfo>, String>> = replies
            .into_iter()
            .map(|r| {
                r.map(|states| {
                    states
                        .into_iter()
                        .filter_map(|s| s.lock.map(|l| (s.key, l)))
                        .collect()
                })
                .map_err(|e| e.to_string())
            })
            .collect();
        if !keys.is_empty() {
            return Ok(keys.iter().map(|k| self.combine(k, &views)).collect());
        }
        // Every lock a majority agrees on, sorted by key.
        let names: BTreeSet<&String> = views.iter().flatten().flat_map(|m| m.keys()).collect();
        Ok(names
            .into_iter()
            .map(|k| self.combine(k, &views))
            .filter(|s| s.lock.is_some())
            .collect())
    }

    /// On every server (a majority must agree), so that the hold ends at the same time
    /// wherever the lease is.
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let (key, owner) = (&acquired.lease.key, &acquired.lease.owner);
        let what = format!("cannot leave lock '{key}' held");
        let limit = self.tuning.server.op_timeout;
        let replies = self
            .on_all(&what, limit, |b| async move {
                b.linger_lease(key, owner, left).await
            })
            .await;
        let errors: Vec<Error> = replies.into_iter().filter_map(Result::err).collect();
        let n = self.members.len();
        if n - errors.len() >= self.quorum {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "{what} on {}: {}: {}",
            self.name,
            votes::done_on("held on", n - errors.len(), n, self.quorum),
            joined(&errors)
        )))
    }

    async fn record_run(&self, key: &str, run: &crate::backend::RunRecord) -> Result<()> {
        self.record_run_on_all(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<crate::backend::LastRuns> {
        self.last_runs_on_all(key).await
    }
}

/// The error of a renewal or release that did not get a majority: `NotOwner` when a
/// majority refused (the caller surely lost the lease), `Unavailable` otherwise.
fn refusal(verdict: Verdict, msg: String) -> Error {
    match verdict {
        Verdict::Refused => Error::NotOwner(msg),
        _ => Error::Unavailable(msg),
    }
}
