//! Redlock: one lock held on a majority of several independent Redis servers, so that it
//! survives the loss of a minority of them.
//!
//! Each server keeps the single-server layout and scripts of [`super::redis`]; this module
//! runs one [`RedisBackend`] per server and adds the quorum logic. With `N` servers the
//! quorum is `Q = N/2 + 1` (2 of 3, 3 of 5).
//!
//! # Acquire
//!
//! 1. Note the monotonic time `T0`, then send the acquire script to **every server at
//!    once** (the futures are joined, never awaited one after another), each bounded by a
//!    short per-server timeout, [`acquire_timeout`] = TTL/10 clamped to 50..200 ms: a dead
//!    or frozen server costs at most that, and leaves most of the TTL as validity (a waiter
//!    whose servers answered too late allows more, up to [`max_acquire_timeout`]).
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
//! # Waiting
//!
//! Redlock waiters are **not** served in arrival order: there is no queue across servers,
//! and no queue entry is ever written (so none can be left behind). After the first
//! refusal the waiter subscribes to the release channel of the key on the *lead* server
//! (the one with the smallest URL; on every other server when the lead cannot be reached),
//! then tries again at once (no release can slip between the refusal and the
//! subscription). It then sleeps until a release message, the expiry of the lease it saw
//! (the smallest TTL reported), or one heartbeat, whichever comes first, and retries after
//! a random delay of up to [`RedlockTuning::jitter`] (10 ms). A retry that follows a
//! release or a back-off asks the lead server first and stops there if it refuses, so that
//! contenders meet on one server instead of splitting the vote. A waiter that loses a
//! race, sees the vote split, or gets no majority of answers in time backs off (without
//! listening) for a random delay whose bound doubles each time, up to
//! [`RedlockTuning::max_backoff`] (see `redlock/wait.rs`). Taking back a grant that did
//! not make a majority wakes nobody. A server that does not answer in time is busy, not dead: the
//! waiter gives it longer next time and fails with `Unavailable` only when a majority is
//! down (connection refused or reset) for the operation timeout, or when no majority has
//! answered for [`RedlockTuning::stall`]; with `--no-wait`, at once. Either way the error
//! names every server that failed.
//!
//! # Renew and release
//!
//! Renew goes to every server at once and succeeds when a majority renewed, with the
//! validity measured from when the requests were sent. `NotOwner` when a majority
//! definitely says the caller is not the owner (then `exec` kills at once), `Unavailable`
//! when no majority can be reached (then `exec` retries on its schedule and kills before
//! the lease can expire). Release goes to every server at once.
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
//! **Under the Redlock timing assumptions** (below), holders' validity windows do not
//! overlap, and tokens increase in the order of those windows.
//!
//! **Not guaranteed**: that a token is never *reused* after data loss beyond the above, nor
//! that tokens are consecutive.
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
use futures_util::future::{join_all, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::redis::{Attempt, Busy, RedisBackend, Tuning};
use super::{
    now_ms, AcquireRequest, Acquired, Backend, KeyStatus, Lease, LockInfo, ReleaseMode, Released,
    ServerView, WaitInfo, WaitOptions, CANCEL_GRACE,
};
use crate::config::redact_url;
use crate::error::{Error, Result};
use crate::lease::drift;

mod wait;

/// Timing knobs of the quorum. The defaults suit production; tests shrink them.
#[derive(Debug, Clone, Copy)]
pub struct RedlockTuning {
    /// Each server's timing: `connect_timeout` when connecting, `op_timeout` for one release,
    /// status or subscribe request, `heartbeat` as the longest sleep of a waiter without news.
    pub server: Tuning,
    /// Longest random delay before a retry; doubles with each split vote, up to 16x.
    pub jitter: Duration,
    /// Longest back-off of a waiter that lost races or got no answer in time.
    pub max_backoff: Duration,
    /// A waiter gives up (`Unavailable`) when a majority is connected but has answered no
    /// request in time for this long (frozen, not just busy).
    pub stall: Duration,
    /// A server that could not be reached is tried again at most this often.
    pub reconnect_every: Duration,
}

impl Default for RedlockTuning {
    fn default() -> RedlockTuning {
        RedlockTuning {
            server: Tuning {
                connect_timeout: Duration::from_secs(2),
                op_timeout: Duration::from_secs(1),
                heartbeat: Duration::from_secs(1),
                liveness: Duration::from_secs(4),
                exclusive: false,
            },
            jitter: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
            stall: Duration::from_secs(30),
            reconnect_every: Duration::from_secs(1),
        }
    }
}

/// How long one server may take to answer an acquire request for a lease of `ttl`:
/// TTL/10, at least 50 ms (a loaded host or a remote server), at most 200 ms (a dead server
/// must not eat the lease).
pub fn acquire_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(50), Duration::from_millis(200))
}

/// The longest a waiter gives a server that answered too slowly: twice as long after each
/// such round, up to TTL/5 (as a renewal), and less than `op_timeout`, the server's own
/// request timeout. The validity counts the time taken, so a slow answer only shortens it.
pub fn max_acquire_timeout(ttl: Duration, op_timeout: Duration) -> Duration {
    renew_timeout(ttl)
        .min(op_timeout / 2)
        .max(acquire_timeout(ttl))
}

/// How long one server may take to answer a renew request: TTL/5, 50 ms to 1 s. A renewal
/// returns as soon as a majority answered, so a dead server does not slow it down.
pub fn renew_timeout(ttl: Duration) -> Duration {
    (ttl / 5).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// The quorum of `n` servers.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// One server of the quorum: connected, or down and retried now and then.
struct Member {
    /// The URL as given (it may carry a password), to reconnect.
    url: String,
    /// The redacted URL, for messages.
    shown: String,
    tuning: RedlockTuning,
    state: Mutex<State>,
}

enum State {
    Up(Arc<RedisBackend>),
    Down {
        error: String,
        retry_at: Instant,
        connecting: bool,
    },
}

impl Member {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server's backend, or why it is down. A down server is reconnected in the
    /// background (at most every `reconnect_every`), never on the caller's clock.
    fn backend(self: &Arc<Self>) -> Result<Arc<RedisBackend>> {
        let mut state = self.lock();
        match &mut *state {
            State::Up(b) => Ok(b.clone()),
            State::Down {
                error,
                retry_at,
                connecting,
            } => {
                if !*connecting && Instant::now() >= *retry_at {
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        *connecting = true;
                        let me = Arc::clone(self);
                        runtime.spawn(async move { me.reconnect().await });
                    }
                }
                Err(Error::Unavailable(error.clone()))
            }
        }
    }

    async fn reconnect(&self) {
        let next = match RedisBackend::connect_with(&self.url, self.tuning.server).await {
            Ok(b) => State::Up(Arc::new(b)),
            Err(e) => State::Down {
                error: e.to_string(),
                retry_at: Instant::now() + self.tuning.reconnect_every,
                connecting: false,
            },
        };
        *self.lock() = next;
    }

    fn timed_out(&self, what: &str, limit: Duration) -> Error {
        Error::Unavailable(format!(
            "{}: {what}: timed out after {} (server not answering)",
            self.shown,
            humantime::format_duration(limit)
        ))
    }

    /// Runs `op` on this server within `limit`.
    async fn call<T, Fut>(
        self: &Arc<Self>,
        what: &str,
        limit: Duration,
        op: impl FnOnce(Arc<RedisBackend>) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        self.call_within(what, limit, op)
            .await
            .map_err(Failure::into_error)
    }

    /// [`Self::call`], telling a server that did not answer within `limit` (busy, or
    /// frozen) from one that is down (not connected, connection refused or reset, or an
    /// error reply).
    async fn call_within<T, Fut>(
        self: &Arc<Self>,
        what: &str,
        limit: Duration,
        op: impl FnOnce(Arc<RedisBackend>) -> Fut,
    ) -> Result<T, Failure>
    where
        Fut: Future<Output = Result<T>>,
    {
        let backend = self.backend().map_err(Failure::Down)?;
        let request = async {
            backend.reconnect_detached().await?;
            op(backend).await
        };
        let mut request = std::pin::pin!(request);
        // The limit is looked at first: a process that was not scheduled for longer than
        // the server's own request timeout must not take that timeout for a dead server.
        tokio::select! {
            biased;
            _ = tokio::time::sleep(limit) => {}
            reply = &mut request => return reply.map_err(Failure::Down),
        }
        // A starved process wakes with the timer and the answer due at once: let the
        // connection read what already arrived before calling the server slow.
        tokio::task::yield_now().await;
        match request.now_or_never() {
            Some(Ok(v)) => Ok(v),
            _ => Err(Failure::Slow(self.timed_out(what, limit))),
        }
    }
}

/// Why one server's request failed.
enum Failure {
    /// Not connected, connection refused or reset, or an error reply.
    Down(Error),
    /// No answer in time: the server may be busy, or frozen.
    Slow(Error),
}

impl Failure {
    fn into_error(self) -> Error {
        match self {
            Failure::Down(e) | Failure::Slow(e) => e,
        }
    }
}

/// Refuses a quorum that names one server twice (`127.0.0.1:P` and `localhost:P`): its
/// vote would count twice. Servers are told apart by their `run_id`; servers that are down
/// or do not tell it are not compared.
async fn same_server_twice(members: &[Arc<Member>]) -> Result<()> {
    let ids = join_all(members.iter().map(|m| async move {
        match m.backend() {
            Ok(b) => b.run_id().await,
            Err(_) => None,
        }
    }))
    .await;
    for (i, id) in ids.iter().enumerate() {
        let Some(id) = id else { continue };
        if let Some(j) = ids[..i].iter().position(|other| other.as_ref() == Some(id)) {
            return Err(Error::Usage(format!(
                "{} and {} are the same Redis server (run_id {id}): a Redlock quorum needs independent servers, each named once",
                members[j].shown, members[i].shown
            )));
        }
    }
    Ok(())
}

/// Joins per-server error messages into one line.
fn joined(errors: &[Error]) -> String {
    let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    lines.join("; ")
}

/// A quorum of independent Redis servers (see the module documentation).
pub struct RedlockBackend {
    members: Vec<Arc<Member>>,
    /// The server contending waiters ask first: the same for every client given the same
    /// servers in any order (the smallest URL).
    lead: usize,
    quorum: usize,
    tuning: RedlockTuning,
    name: String,
}

/// What one acquire round ended with.
enum Round {
    Won(Lease),
    Lost(Refusal),
}

/// What a lost round learned.
#[derive(Default)]
struct Refusal {
    /// The owner seen on most servers, its lock, and on how many servers.
    holder: Option<(LockInfo, usize)>,
    /// When the lease seen may expire (smallest TTL reported).
    retry: Option<Duration>,
    /// The highest fencing token seen: the floor of the next round.
    max_token: u64,
    /// Servers that answered.
    answered: usize,
    /// Why servers failed, one message each (naming the server).
    failed: Vec<Error>,
    /// How many of them are down (the others did not answer in time).
    down: usize,
    /// A reason beyond the counts (validity used up, tokens not confirmed).
    note: Option<String>,
    /// Only the lead server was asked, and it refused.
    at_lead: bool,
}

impl Refusal {
    /// The lead server refused: it alone was asked.
    fn at_lead(busy: Busy, floor: u64) -> Refusal {
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

    fn info(&self) -> WaitInfo {
        WaitInfo {
            holder: self.holder.as_ref().map(|(lock, _)| lock.clone()),
            position: None,
            waiters: None,
        }
    }

    fn gist(&self) -> Option<(String, u64)> {
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
                "{}: cannot reach a majority: {up} of {} servers answered, {} needed: {}",
                backend.name,
                urls.len(),
                backend.quorum,
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
    async fn on_all<T, Fut>(
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

    /// One acquire round on every server at once (see the module documentation).
    /// With `lead`, the lead server is asked first, and the round ends there if it refuses.
    async fn round(&self, req: &AcquireRequest, floor: u64, limit: Duration, lead: bool) -> Round {
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

        let mut refusal = Refusal {
            max_token: floor,
            ..Refusal::default()
        };
        let mut fresh: Vec<(usize, Lease)> = Vec::new();
        let mut reentered: Vec<(usize, Lease)> = Vec::new();
        let mut unknown: Vec<usize> = Vec::new();
        let mut busy_at: Vec<usize> = Vec::new();
        let mut holders: HashMap<String, (LockInfo, usize)> = HashMap::new();
        for (i, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok(Attempt::Granted(lease)) => {
                    refusal.answered += 1;
                    refusal.max_token = refusal.max_token.max(lease.fencing_token);
                    if lease.reentered {
                        reentered.push((i, lease));
                    } else {
                        fresh.push((i, lease));
                    }
                }
                Ok(Attempt::Busy(busy)) => {
                    refusal.answered += 1;
                    busy_at.push(i);
                    if let Some(retry) = busy.retry {
                        refusal.retry = Some(refusal.retry.map_or(retry, |r| r.min(retry)));
                    }
                    if let Some(lock) = busy.holder {
                        refusal.max_token = refusal.max_token.max(lock.fencing_token);
                        holders
                            .entry(lock.owner.clone())
                            .and_modify(|(_, n)| *n += 1)
                            .or_insert((lock, 1));
                    }
                }
                Err(failure) => {
                    unknown.push(i);
                    if let Failure::Down(_) = failure {
                        refusal.down += 1;
                    }
                    refusal.failed.push(failure.into_error());
                }
            }
        }
        refusal.holder = holders.into_values().max_by_key(|(_, n)| *n);

        // A majority re-entered for one owner: the enclosing lease, one level deeper.
        let mut by_owner: HashMap<&str, Vec<&Lease>> = HashMap::new();
        for (_, lease) in &reentered {
            by_owner.entry(&lease.owner).or_default().push(lease);
        }
        let reentry = by_owner
            .into_values()
            .find(|leases| leases.len() >= self.quorum)
            .map(|leases| {
                let token = leases.iter().map(|l| l.fencing_token).max().unwrap_or(0);
                (leases[0].owner.clone(), token)
            });

        let mut won = None;
        if let Some((owner, token)) = reentry {
            won = Some((owner, token, true));
        } else if fresh.len() >= self.quorum {
            let token = fresh
                .iter()
                .map(|(_, l)| l.fencing_token)
                .max()
                .unwrap_or(0);
            // Servers that answered without granting get their counters raised too.
            let others: Vec<usize> = busy_at
                .iter()
                .copied()
                .chain(reentered.iter().map(|(i, _)| *i))
                .collect();
            if self.confirm(req, token, &fresh, &others, limit).await {
                won = Some((req.owner.clone(), token, false));
            } else {
                refusal.note = Some("the servers' fencing counters could not be aligned".into());
            }
        }
        if let Some((owner, fencing_token, was_reentered)) = won {
            let validity = req
                .ttl
                .checked_sub(sent_at.elapsed() + drift(req.ttl))
                .filter(|v| !v.is_zero());
            match validity {
                Some(validity) => {
                    // Grants beside the majority (fresh grants where a majority re-entered,
                    // or re-entries where a majority granted afresh) are taken back.
                    if was_reentered && !fresh.is_empty() {
                        let others: Vec<usize> = fresh.iter().map(|(i, _)| *i).collect();
                        self.take_back(req, &others, &[], limit).await;
                    } else if !was_reentered && !reentered.is_empty() {
                        let nested: Vec<(usize, String)> = reentered
                            .iter()
                            .map(|(i, l)| (*i, l.owner.clone()))
                            .collect();
                        self.take_back(req, &[], &nested, limit).await;
                    }
                    guard.armed = false;
                    return Round::Won(Lease {
                        key: req.key.clone(),
                        owner,
                        fencing_token,
                        ttl: req.ttl,
                        reentered: was_reentered,
                        sent_at,
                        bound: false,
                        expires_at_ms: now_ms() + validity.as_millis() as u64,
                    });
                }
                None => {
                    refusal.note = Some(format!(
                        "acquiring took {} of a {} lease, leaving no validity",
                        humantime::format_duration(Duration::from_millis(
                            sent_at.elapsed().as_millis() as u64
                        )),
                        humantime::format_duration(req.ttl)
                    ));
                }
            }
        }

        // Lost: take back every grant, and anything a server that did not answer may have
        // granted, everywhere at once.
        let mut mine: Vec<usize> = fresh.iter().map(|(i, _)| *i).collect();
        mine.extend(unknown);
        let nested: Vec<(usize, String)> = reentered
            .iter()
            .map(|(i, l)| (*i, l.owner.clone()))
            .collect();
        self.take_back(req, &mine, &nested, limit).await;
        guard.armed = false;
        Round::Lost(refusal)
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
    ) -> Result<Vec<Result<Attempt, Failure>>, Refusal> {
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
                Ok(Attempt::Busy(busy)) => return Err(Refusal::at_lead(busy, floor)),
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

    /// Aligns the fencing counters on `token`, the largest of the fresh grants: raises the
    /// counter of every server that answered with less (`others`: refused or re-entered
    /// for another owner; fresh grants below `token`) and stamps `token` on the lease where
    /// `req.owner` holds it. True when a majority holds the lease stamped with `token`.
    /// Skipped when every server that answered granted with `token` (the usual case).
    async fn confirm(
        &self,
        req: &AcquireRequest,
        token: u64,
        fresh: &[(usize, Lease)],
        others: &[usize],
        limit: Duration,
    ) -> bool {
        let agreeing = fresh
            .iter()
            .filter(|(_, l)| l.fencing_token == token)
            .count();
        let behind: Vec<usize> = fresh
            .iter()
            .filter(|(_, l)| l.fencing_token < token)
            .map(|(i, _)| *i)
            .collect();
        if behind.is_empty() && others.is_empty() {
            return agreeing >= self.quorum;
        }
        let what = format!("cannot acquire lock '{}'", req.key);
        let (key, owner) = (&req.key, &req.owner);
        let targets: Vec<usize> = behind.iter().chain(others).copied().collect();
        let calls = targets.iter().map(|&i| {
            self.members[i].call(&what, limit, |b| async move {
                b.confirm_token(key, owner, token).await
            })
        });
        let confirmed = join_all(calls).await;
        let stamped = targets
            .iter()
            .zip(confirmed)
            .filter(|(i, r)| matches!(r, Ok(true)) && behind.contains(i))
            .count();
        agreeing + stamped >= self.quorum
    }

    /// Takes back, on all the given servers at once and waking nobody, the fresh grants to
    /// `req.owner` on `fresh` and one level of the re-entries on `nested`.
    async fn take_back(
        &self,
        req: &AcquireRequest,
        fresh: &[usize],
        nested: &[(usize, String)],
        limit: Duration,
    ) {
        let key = &req.key;
        let calls = fresh
            .iter()
            .map(|i| (*i, req.owner.as_str(), ReleaseMode::All))
            .chain(
                nested
                    .iter()
                    .map(|(i, o)| (*i, o.as_str(), ReleaseMode::One)),
            )
            .map(|(i, owner, mode)| {
                self.members[i].call("take back", limit, move |b| async move {
                    b.take_back(key, owner, mode).await
                })
            });
        join_all(calls).await;
    }

    /// Takes back, on every server, whatever a round cut short by a cancel may have been
    /// granted; sent on the connections the round used, so a server that answers late runs
    /// it after the grant. Bounded by [`CANCEL_GRACE`]: a signal ends the wait at once.
    async fn give_back_cancelled(&self, req: &AcquireRequest) {
        let all: Vec<usize> = (0..self.members.len()).collect();
        let giving_back = self.take_back(req, &all, &[], CANCEL_GRACE);
        let _ = tokio::time::timeout(CANCEL_GRACE, giving_back).await;
    }

    /// The per-key view of every server, and the lock a majority agrees on.
    fn combine(&self, key: &str, views: &[Result<HashMap<String, LockInfo>, String>]) -> KeyStatus {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for locks in views.iter().flatten() {
            if let Some(lock) = locks.get(key) {
                *counts.entry(&lock.owner).or_default() += 1;
            }
        }
        let winner = counts
            .into_iter()
            .find(|(_, n)| *n >= self.quorum)
            .map(|(owner, _)| owner.to_string());
        let mut agreeing: Vec<&LockInfo> = Vec::new();
        let mut servers = Vec::with_capacity(views.len());
        for (member, view) in self.members.iter().zip(views) {
            let server = member.shown.clone();
            servers.push(match view {
                Ok(locks) => {
                    let lock = locks.get(key);
                    let agrees = lock.is_some_and(|l| Some(&l.owner) == winner.as_ref());
                    if let (true, Some(l)) = (agrees, lock) {
                        agreeing.push(l);
                    }
                    ServerView {
                        server,
                        owner: lock.map(|l| l.owner.clone()),
                        fencing_token: lock.map(|l| l.fencing_token),
                        ttl_left_ms: lock.and_then(|l| l.ttl_left_ms),
                        agrees,
                        error: None,
                    }
                }
                Err(e) => ServerView {
                    // The message names the server, which the view already does.
                    error: Some(
                        e.strip_prefix(&format!("{server}: "))
                            .unwrap_or(e)
                            .to_string(),
                    ),
                    server,
                    owner: None,
                    fencing_token: None,
                    ttl_left_ms: None,
                    agrees: false,
                },
            });
        }
        let lock = (agreeing.len() >= self.quorum).then(|| {
            // The lease lasts while a majority still has it: the Q-th longest TTL.
            let mut ttls: Vec<u64> = agreeing
                .iter()
                .map(|l| l.ttl_left_ms.unwrap_or(0))
                .collect();
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let newest = agreeing
                .iter()
                .max_by_key(|l| l.fencing_token)
                .copied()
                .cloned();
            newest.map(|l| LockInfo {
                ttl_left_ms: Some(ttls[self.quorum - 1]),
                ..l
            })
        });
        KeyStatus {
            key: key.to_string(),
            lock: lock.flatten(),
            waiters: None,
            servers: Some(servers),
        }
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
            let open = n - refused.len() - failed.len();
            if renewed.len() >= self.quorum || refused.len() >= self.quorum || open < self.quorum {
                break;
            }
        }
        drop(pending);
        if renewed.len() >= self.quorum {
            let validity = ttl
                .checked_sub(sent_at.elapsed() + drift(ttl))
                .filter(|v| !v.is_zero());
            let Some(validity) = validity else {
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
        let refusals = errors.iter().filter(|e| matches!(e, Error::NotOwner(_)));
        let msg = format!(
            "cannot renew lock '{key}' on {}: renewed on {} of {n} servers, {} needed: {}",
            self.name,
            renewed.len(),
            self.quorum,
            joined(&errors)
        );
        if refusals.count() >= self.quorum {
            Err(Error::NotOwner(msg))
        } else {
            Err(Error::Unavailable(msg))
        }
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
        if released.len() >= self.quorum {
            let mut owners: HashMap<&str, usize> = HashMap::new();
            for r in &released {
                if let Some(o) = &r.previous_owner {
                    *owners.entry(o).or_default() += 1;
                }
            }
            let previous_owner = owners
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .map(|(o, _)| o.to_string());
            let still = released.iter().filter(|r| r.still_held).count();
            return Ok(Released {
                previous_owner,
                still_held: still >= self.quorum,
            });
        }
        let msg = format!(
            "cannot release lock '{key}' on {}: released on {} of {n} servers, {} needed: {}",
            self.name,
            released.len(),
            self.quorum,
            joined(&errors)
        );
        if refused >= self.quorum {
            Err(Error::NotOwner(msg))
        } else {
            Err(Error::Unavailable(msg))
        }
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
                "cannot read lock status on {}: {answered} of {} servers answered, {} needed: {}",
                self.name,
                self.members.len(),
                self.quorum,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorums() {
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

    #[test]
    fn timeouts_leave_most_of_the_lease() {
        let ms = Duration::from_millis;
        assert_eq!(acquire_timeout(ms(100)), ms(50));
        assert_eq!(acquire_timeout(ms(1_000)), ms(100));
        assert_eq!(acquire_timeout(Duration::from_secs(30)), ms(200));
        for ttl in [100u64, 300, 1_000, 30_000] {
            let ttl = ms(ttl);
            assert!(acquire_timeout(ttl) + drift(ttl) < ttl, "{ttl:?}");
            assert!(renew_timeout(ttl) <= ttl / 2, "{ttl:?}");
        }
    }
}
