//! The Redlock backend value: connecting to the quorum, renew, release and status (the
//! acquire round is `round.rs`, the waiting `wait.rs`).
//!
//! # Renew and release
//!
//! Renew goes to every server at once and succeeds when a majority renewed, with the
//! validity measured from when the requests were sent. `NotOwner` when a majority
//! definitely says the caller is not the owner (then `exec` kills at once), `Transient`
//! when no majority answers but each server that failed may come back (then `exec`
//! retries on its schedule and kills before the lease can expire), `Unavailable` when one
//! will not (a refused password: `exec` kills at once). Release goes to every server at
//! once.
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

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::join_all;

use super::member::{same_server_twice, Member, State};
use super::tuning::RedlockTuning;
use crate::backend::quorum::modes::Modes;
use crate::backend::quorum::outcome::{self, joined, short_of_majority};
use crate::backend::quorum::votes;
use crate::backend::quorum::votes::quorum;
use crate::backend::redis::{parse_url, RedisBackend, Target};
use crate::backend::{
    AcquireRequest, Acquired, Backend, KeyStatus, Lease, ReleaseMode, Released, WaitOptions,
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
    /// How the holders this process acquired hold their keys (see `renew.rs`).
    pub(super) modes: Modes,
    /// `?layout=plain` on every server: the application's canonical lock on K itself,
    /// taken on each server as node's `redlock` takes it (see `wait.rs` for the waiting).
    pub(super) plain: bool,
}

impl RedlockBackend {
    /// Connects to every server at once with the default [`RedlockTuning`].
    pub async fn connect(urls: &[String]) -> Result<RedlockBackend> {
        Self::connect_with(urls, RedlockTuning::default()).await
    }

    /// Connects to every server at once. Fails (naming every server that failed;
    /// `Transient` when each of them may come back) when fewer than a majority answer; servers that did not answer are retried in
    /// the background later.
    pub async fn connect_with(urls: &[String], tuning: RedlockTuning) -> Result<RedlockBackend> {
        let auth = std::env::var(crate::env::REDIS_AUTH).ok();
        let targets = urls
            .iter()
            .map(|url| parse_url(url, auth.clone()))
            .collect::<Result<Vec<Target>>>()?;
        let servers: Vec<(&str, &Target)> = urls.iter().map(String::as_str).zip(&targets).collect();
        Self::connect_targets(&servers, tuning).await
    }

    /// [`Self::connect_with`] the servers given as URLs and the targets read from them.
    pub(crate) async fn connect_targets(
        servers: &[(&str, &Target)],
        tuning: RedlockTuning,
    ) -> Result<RedlockBackend> {
        if servers.len() < 2 {
            return Err(Error::Usage(
                "Redlock needs at least two Redis servers (three or more, an odd number, to survive a failure)".into(),
            ));
        }
        let shown: Vec<_> = servers.iter().map(|(u, t)| (redact_url(u), *t)).collect();
        let plain = crate::backend::redis::quorum_is_plain(&shown)?;
        let connecting = servers
            .iter()
            .map(|(url, target)| RedisBackend::connect_target(target, url, tuning.server));
        let results = join_all(connecting).await;
        let mut members = Vec::with_capacity(servers.len());
        let mut failed = Vec::new();
        for (&(url, target), result) in servers.iter().zip(results) {
            let state = match result {
                Ok(b) => State::Up(Arc::new(b)),
                Err(e @ Error::Usage(_)) => return Err(e),
                Err(e) => {
                    let state = State::down(&e, Instant::now() + tuning.reconnect_every);
                    failed.push(e);
                    state
                }
            };
            members.push(Arc::new(Member {
                url: url.to_string(),
                target: target.clone(),
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
            quorum: quorum(servers.len()),
            tuning,
            name: format!("redlock({})", shown.join(",")),
            members,
            modes: Modes::default(),
            plain,
        };
        let up = servers.len() - failed.len();
        if up < backend.quorum {
            let msg = format!(
                "{}: cannot reach a majority: {}: {}",
                backend.name,
                votes::answered(up, servers.len(), backend.quorum),
                joined(&failed)
            );
            return Err(short_of_majority(&failed, msg));
        }
        Ok(backend)
    }

    /// How many servers make a majority.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many servers must grant `req`: a majority, or more for a semaphore (see
    /// [`votes::quorum_for`]).
    pub(super) fn needed(&self, req: &AcquireRequest) -> usize {
        votes::quorum_for(self.members.len(), req.sharing)
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
        let order = Some(crate::backend::ORDER_NONE);
        req.queue.check(&req.key, &Backend::describe(self), order)?;
        if self.plain && !req.sharing.is_exclusive() {
            let asked = req.sharing.describe();
            return Err(Error::sharing_unsupported(&req.key, &self.name, &asked));
        }
        if wait.cancel.is_cancelled() {
            return Err(self.cancelled(req));
        }
        self.acquire_loop(req, wait).await
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_on_quorum(key, owner, ttl).await
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let what = format!("cannot release lock '{key}'");
        let limit = self.tuning.server.op_timeout;
        let replies = self
            .on_all(&what, limit, |b| async move {
                b.release(key, owner, mode).await
            })
            .await;
        if mode != ReleaseMode::Force {
            self.modes.released(key, owner);
        }
        outcome::released(&self.name, key, replies, self.quorum)
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let limit = self.tuning.server.op_timeout;
        let replies = self
            .on_all("cannot read lock status", limit, |b| async move {
                b.status(keys).await
            })
            .await;
        let servers: Vec<String> = self.members.iter().map(|m| m.shown.clone()).collect();
        outcome::status(&self.name, &servers, keys, replies, self.quorum)
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
        outcome::done_on_majority(&what, &self.name, replies, self.quorum)
    }

    async fn record_run(&self, key: &str, run: &crate::backend::RunRecord) -> Result<()> {
        self.record_run_on_all(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<crate::backend::LastRuns> {
        self.last_runs_on_all(key).await
    }
}
