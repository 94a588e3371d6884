//! The backend trait every lock store implements, and the types that cross it.
//!
//! One trait, one semantics: the conformance suite in `tests/conformance.rs` runs the same
//! behavioural tests against every implementation.
//!
//! * A lease belongs to an *owner id* and carries a *fencing token* that is strictly
//!   increasing per key, for every acquisition, and never reset.
//! * Acquiring a key already held by one of `reenter` owners re-enters it: the depth goes
//!   up, the owner and token stay the same, and only the matching number of releases frees it.
//! * Each store knows how to be told of a release (a Redis `BLPOP` on the waiter's own wake
//!   list, an etcd or ZooKeeper watch, PostgreSQL `LISTEN`, kernel file locks) and says so in
//!   [`store::LockStore::sleep`]; the waiting around it (deadline, cancellation, progress,
//!   back-off) is written once, in [`waiting`].

pub mod estimate;
// Each store but the local one is a cargo feature (Cargo.toml); the registry says which
// are in, and what a URL of a left-out one gets.
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "memcached"))]
pub mod group;
pub mod key_status;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub mod line;
pub mod local;
#[cfg(feature = "memcached")]
pub mod memcached;
pub mod memory;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "redis", feature = "memcached"))]
pub mod quorum;
#[cfg(feature = "redis")]
pub mod redis;
// Redlock asks each server as the Redis store does: one feature for both.
pub mod queueing;
#[cfg(feature = "redis")]
pub mod redlock;
pub mod registry;
pub mod runs;
pub mod session_lock;
pub mod sharing;
pub mod spec;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql;
pub mod store;
pub mod target;
pub mod url;
pub mod waiting;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use self::queueing::{
    Queueing, MAX_PRIORITY, ORDER_ETCD, ORDER_NONE, ORDER_NOT_YET, ORDER_ZOOKEEPER,
};
pub use self::sharing::Sharing;

use crate::error::Result;

/// Who holds (or waits for) a lock, shown by `status` and by the waiting line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    pub user: String,
    /// The protected command line (exec), or `dlock lock`. Never dlock's own argv,
    /// which may carry a backend password.
    pub command: String,
    /// Wall-clock time of acquisition, milliseconds since the Unix epoch.
    pub acquired_at_ms: u64,
    /// Set when the run has finished and `exec --hold-at-least` leaves the key held until
    /// this wall-clock time (ms since the Unix epoch): `status` says why it is still held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until_ms: Option<u64>,
    /// What a leader proclaims (`dlock elect --value`), shown by `dlock leader`; absent for
    /// other holders, so that records written before it existed still read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// What `acquire` needs to know.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub key: String,
    /// The owner id to use for a fresh acquisition.
    pub owner: String,
    /// Owners this caller acts for (from `DLOCK_OWNER`/`DLOCK_OWNERS`): if one of them holds
    /// the key, the call re-enters instead of waiting.
    pub reenter: Vec<String>,
    pub ttl: Duration,
    pub holder: Holder,
    /// The lease must outlive this process (`dlock lock`): it ends by unlock or TTL only.
    /// When false (`exec`), a backend may also end it the moment this process dies.
    pub detached: bool,
    /// Serve waiters in arrival order (default). False lets any waiter take a freed lock.
    pub fair: bool,
    /// Alone (the default), beside other readers (`--shared`), or as one of at most N
    /// (`--limit N`). A store that keeps only exclusive leases refuses the others
    /// ([`store::LockStore::supports`]).
    pub sharing: Sharing,
    /// Where the request stands in the key's queue beside other waiters (`--priority`,
    /// `--supersede`).
    pub queue: Queueing,
}

/// A callback told of a waiter's progress.
pub type ProgressFn = Arc<dyn Fn(&WaitInfo) + Send + Sync>;

/// How long and how to wait in `acquire`.
#[derive(Clone)]
pub struct WaitOptions {
    /// `None`: wait forever. A deadline in the past: try once (`--no-wait`).
    pub deadline: Option<Instant>,
    /// Cancelled on a signal: the backend must leave nothing held or queued and return
    /// `Error::Cancelled(_, 0)`; the caller, who knows the signal, fills in its number.
    pub cancel: CancellationToken,
    /// Called whenever the backend learns something new about the wait (holder, position).
    pub progress: Option<ProgressFn>,
    /// When the wait began: `deadline` counts from it, and so does the time a wait that
    /// ran out reports (`gave up after 1s`, not the few ms less since the store was asked).
    pub since: Instant,
}

impl WaitOptions {
    /// Wait until `deadline` (or forever), never cancelled, no progress report.
    pub fn until(deadline: Option<Instant>) -> WaitOptions {
        WaitOptions {
            deadline,
            cancel: CancellationToken::new(),
            progress: None,
            // tokio's clock, as `expired` reads it: the same as the system's, except in
            // tests that pause it.
            since: tokio::time::Instant::now().into_std(),
        }
    }

    /// Reports progress, if anyone listens.
    pub fn report(&self, info: &WaitInfo) {
        if let Some(p) = &self.progress {
            p(info);
        }
    }

    /// True when the deadline has passed, on tokio's clock: the same as the system's,
    /// except in tests that pause it, which then drive every wait alike.
    pub fn expired(&self) -> bool {
        let now = tokio::time::Instant::now();
        self.deadline
            .is_some_and(|d| now >= tokio::time::Instant::from_std(d))
    }
}

/// What a waiter knows while it waits.
#[derive(Debug, Clone, Default)]
pub struct WaitInfo {
    /// The current holder, when known.
    pub holder: Option<LockInfo>,
    /// 1-based position among the waiters, when the backend keeps a queue.
    pub position: Option<u64>,
    /// Number of waiters, when known.
    pub waiters: Option<u64>,
}

/// A lease as granted.
#[derive(Debug, Clone)]
pub struct Lease {
    pub key: String,
    pub owner: String,
    pub fencing_token: u64,
    pub ttl: Duration,
    /// True when this acquisition re-entered a lease the caller's tree already held.
    pub reentered: bool,
    /// Monotonic time at which the granting request was sent: the lease is valid at most
    /// until `sent_at + ttl` (see [`crate::lease`] for the safety margins). It is the send
    /// time of the attempt that was granted, never the start of a wait before it.
    pub sent_at: Instant,
    /// The lease lives exactly as long as this process holds its guard (the local store's
    /// `exec` leases): it cannot expire while we live, so a renewal that fails or is slow
    /// is not a lost lease. Only an answer that the lease is gone (`unlock --force`) is.
    pub bound: bool,
    /// Wall-clock expiry, milliseconds since the Unix epoch (for `--json` output).
    pub expires_at_ms: u64,
}

impl Lease {
    /// A lease granted for `ttl` by a store that keeps it whether or not this process
    /// lives (not bound), expiring `ttl` from now on this machine's clock.
    pub fn timed(
        key: impl Into<String>,
        owner: impl Into<String>,
        fencing_token: u64,
        ttl: Duration,
        reentered: bool,
        sent_at: Instant,
    ) -> Lease {
        Lease {
            key: key.into(),
            owner: owner.into(),
            fencing_token,
            ttl,
            reentered,
            sent_at,
            bound: false,
            expires_at_ms: now_ms() + ttl.as_millis() as u64,
        }
    }

    /// The same lease, expiring `left` from now (what the store said is left of it).
    pub fn expiring_in(self, left: Duration) -> Lease {
        self.expiring_at(now_ms() + left.as_millis() as u64)
    }

    /// The same lease, expiring at `ms` since the Unix epoch.
    pub fn expiring_at(self, ms: u64) -> Lease {
        Lease {
            expires_at_ms: ms,
            ..self
        }
    }
}

/// A granted lease plus whatever the backend must keep alive while it is held
/// (the local store's file lock). Drop the guard only after releasing, or hand both to
/// [`Backend::release_acquired`].
pub struct Acquired {
    pub lease: Lease,
    pub guard: Option<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Acquired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquired")
            .field("lease", &self.lease)
            .field("guard", &self.guard.is_some())
            .finish()
    }
}

/// How `release` treats the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseMode {
    /// Undo one acquisition: lower the depth, free the key when it reaches zero.
    One,
    /// Free the key whatever the depth (the outermost `exec` ending).
    All,
    /// Free the key whoever holds it (`unlock --force`); the owner is not checked.
    Force,
}

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The owner the lease had (useful with `Force`), `None` when the key was free.
    pub previous_owner: Option<String>,
    /// True when the key is still held (depth was above one).
    pub still_held: bool,
}

/// One held lock as seen by `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockInfo {
    /// Not serialized: the JSON line that carries a `LockInfo` names the key itself.
    #[serde(skip_serializing)]
    pub key: String,
    pub owner: String,
    pub fencing_token: u64,
    #[serde(flatten)]
    pub holder: Holder,
    /// Time left on the lease; `None` when the lease lives as long as its holder process
    /// (the local store's `exec` leases).
    pub ttl_left_ms: Option<u64>,
    /// How many nested acquisitions the owner holds.
    pub depth: u32,
}

impl LockInfo {
    /// `OWNER (host pid N: command)`, for messages: escaped for a terminal, since its
    /// host and command come from another user.
    pub fn describe(&self) -> String {
        let h = &self.holder;
        let command = if h.command.is_empty() {
            String::new()
        } else {
            format!(": {}", h.command)
        };
        let why = self
            .why_held()
            .map(|w| format!(", {w}"))
            .unwrap_or_default();
        let line = format!("{} ({} pid {}{command}{why})", self.owner, h.host, h.pid);
        crate::terminal::escape(&line).into_owned()
    }

    /// `finished, held until HH:MM:SS UTC by --hold-at-least` when the run that holds it
    /// has ended and `exec --hold-at-least` keeps the key held.
    pub fn why_held(&self) -> Option<String> {
        let until = self.holder.held_until_ms?;
        let at = std::time::UNIX_EPOCH + Duration::from_millis(until);
        let stamp = humantime::format_rfc3339_seconds(at).to_string();
        let clock = stamp.get(11..19).unwrap_or(&stamp);
        Some(format!(
            "finished, held until {clock} UTC by --hold-at-least"
        ))
    }
}

/// One waiter as seen by `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaiterInfo {
    pub id: String,
    #[serde(flatten)]
    pub holder: Holder,
    /// How it asks to hold the key (`--shared`, `--limit N`); absent from JSON when
    /// exclusive.
    #[serde(skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    /// Its `--priority` (0 by default, and on stores that keep none).
    pub priority: i32,
}

/// The state of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyStatus {
    pub key: String,
    /// `None` when the key is free; the first holder when several hold it.
    pub lock: Option<LockInfo>,
    /// Every holder, in the order they were granted, when the key is held shared or as a
    /// semaphore; empty (and absent from JSON) for an exclusive lock.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<LockInfo>,
    /// How the holders hold it; absent from JSON when exclusive, so that the JSON of an
    /// exclusive lock keeps its shape.
    #[serde(skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    /// Waiters in queue order; `None` when the backend cannot tell.
    pub waiters: Option<Vec<WaiterInfo>>,
    /// What each server of a quorum backend (Redlock) sees; `None` for single stores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<ServerView>>,
}

/// One server's view of a key, for quorum backends: the holder it knows, or why it did
/// not answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerView {
    /// The server's URL, redacted.
    pub server: String,
    /// The owner this server has, `None` when the key is free there (or on error).
    pub owner: Option<String>,
    pub fencing_token: Option<u64>,
    pub ttl_left_ms: Option<u64>,
    /// True when this server's owner is the one a quorum agrees on.
    pub agrees: bool,
    /// Why the server did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// A key's run records are vocabulary of the `Backend` trait, so they are defined here;
// how they are read, merged and encoded is in [`runs`].

/// How long a store keeps a key's run records after the last write: long enough for a
/// monthly job, bounded so that retired keys do not stay forever.
pub const RUN_RECORD_TTL: Duration = Duration::from_secs(40 * 24 * 3600);

/// One finished `exec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub owner: String,
    pub fencing_token: u64,
    /// Who ran it: host, pid, user, command, and when the lock was taken.
    #[serde(flatten)]
    pub holder: Holder,
    /// When CMD started and ended, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// The code `exec` exited with: CMD's own, 128+N when signal N killed it, 79 when the
    /// lease was lost, 124 when `--max-runtime` cut it short.
    pub exit_code: i32,
    /// The signal that ended CMD, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// How long dlock waited for the lock, and how long CMD ran.
    pub waited_ms: u64,
    pub ran_ms: u64,
    /// The durations of the key's last runs, this one last, oldest first (at most
    /// [`HISTORY`](estimate::HISTORY)): what the expected wait is made from. Empty
    /// in records written before histories were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_ms: Vec<u64>,
    /// True when the lease was lost while CMD ran (dlock killed it, exit 79).
    #[serde(default)]
    pub lease_lost: bool,
    /// True when CMD ran longer than `--max-runtime` and was terminated (exit 124).
    #[serde(default)]
    pub timed_out: bool,
}

/// What a store remembers of a key's runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRuns {
    /// The most recent finished run.
    pub last: Option<RunRecord>,
    /// The most recent run that succeeded (the same as `last` when that one did).
    pub last_success: Option<RunRecord>,
}

/// A lock store. Implementations are cheap to share behind an `Arc`.
#[async_trait]
pub trait Backend: Send + Sync {
    /// A short description for messages, e.g. `redis://127.0.0.1:6379` (never a password).
    fn describe(&self) -> String;

    /// Acquires `req.key`, waiting as `wait` says. Errors: `NotObtained` when the deadline
    /// passes, `Cancelled` when `wait.cancel` fires, `Unavailable` when the store fails.
    async fn acquire(&self, req: &AcquireRequest, wait: &WaitOptions) -> Result<Acquired>;

    /// Extends the lease of `owner` on `key` to `ttl` from now. `NotOwner` when the lease is
    /// gone or held by someone else (then nothing changes).
    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease>;

    /// Releases as `mode` says. `NotOwner` when `owner` does not hold it (except `Force`).
    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released>;

    /// Connects now, for a store that connects on its first request, naming `key` (when not
    /// empty) in its errors: reaching a store is ridden out ([`waiting::reach`]), a request
    /// sent only once (`unlock`'s release) is not, so it must not be the one that finds the
    /// store down. By default nothing: the store connected when it was opened.
    async fn ready(&self, _key: &str) -> Result<()> {
        Ok(())
    }

    /// Releases a lease this process acquired, then drops its guard. A backend whose guard
    /// alone ends the lease (the local store's bound leases) drops the guard first instead,
    /// so that the next waiter is woken before any bookkeeping: what `exec` does last.
    ///
    /// A [`Transient`](crate::error::Error::Transient) failure (a client frozen on the key's row, a leader change)
    /// is tried again for as long as the lease could still be alive, at most
    /// [`waiting::pace::RIDE_OUT`]: giving up would leave the next waiter to wait out the TTL.
    /// Only a whole release is tried again: one level of a re-entered lease, released twice
    /// because the first answer was lost, would release its parent's level too.
    async fn release_acquired(&self, acquired: Acquired, mode: ReleaseMode) -> Result<()> {
        let lease = &acquired.lease;
        let until = tokio::time::Instant::now() + lease.ttl.min(waiting::pace::RIDE_OUT);
        let mut round = 0;
        let released = loop {
            match self.release(&lease.key, &lease.owner, mode).await {
                Err(e)
                    if mode != ReleaseMode::One
                        && e.is_retryable()
                        && tokio::time::Instant::now() < until =>
                {
                    let pause = waiting::pace::backoff(round);
                    round += 1;
                    tokio::time::sleep_until(until.min(tokio::time::Instant::now() + pause)).await;
                }
                done => break done,
            }
        };
        drop(acquired);
        released.map(drop)
    }

    /// The state of the named keys, in order; with no key, every held lock.
    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>>;

    /// Every held lock, as `status` with no key, but going on past a key that cannot be
    /// read (the local store's damaged file): why each such key could not be read is in
    /// [`Listing::unreadable`]. A store that cannot read keys one by one fails as a whole.
    async fn list(&self) -> Result<Listing> {
        Ok(Listing {
            held: self.status(&[]).await?,
            unreadable: Vec::new(),
        })
    }

    /// Leaves a lease this process acquired held for `left` more, then to expire by
    /// itself even though this process exits (`exec --hold-at-least`): fencing and
    /// `status` go on seeing it held. A backend whose leases die with their process
    /// (the local store's bound leases) must turn it into one that does not. Lock stores
    /// get a default from [`LockStore::linger`](store::LockStore::linger).
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()>;

    /// Returns when one of `keys` may have changed (released, taken, expired), or after
    /// about `pause` at most; a spurious return is fine, callers look again. `dlock wait`
    /// and `status --watch` sleep here. A store with notifications uses them; the default
    /// polls.
    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        poll(keys, pause).await
    }

    /// Keeps `run` as the last run of `key`, and as its last success when it succeeded,
    /// for [`RUN_RECORD_TTL`]. Every store keeps them beside its locks.
    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()>;

    /// [`Backend::record_run`] for a run whose lock this process releases next, with
    /// [`Backend::release_acquired`]: a store may write the record with the release, in
    /// the same round trip and still before the next holder's. A failure then shows as
    /// the release's. The default records at once.
    async fn record_run_before_release(&self, key: &str, run: &RunRecord) -> Result<()> {
        self.record_run(key, run).await
    }

    /// What [`Backend::record_run`] kept for `key`.
    async fn last_runs(&self, key: &str) -> Result<LastRuns>;
}

/// How often [`Backend::watch`] looks again on a store without notifications.
pub const WATCH_POLL: Duration = Duration::from_millis(200);

/// [`Backend::watch`] on a store without notifications: a pause of at most [`WATCH_POLL`].
pub async fn poll(_keys: &[String], pause: Duration) -> Result<()> {
    tokio::time::sleep(pause.min(WATCH_POLL)).await;
    Ok(())
}

/// What [`Backend::list`] found.
#[derive(Debug, Default)]
pub struct Listing {
    /// The held locks that could be read, sorted by key.
    pub held: Vec<KeyStatus>,
    /// One error per key that could not be read, each naming it.
    pub unreadable: Vec<crate::error::Error>,
}

/// How long a cancelled `acquire` may spend cleaning up (leaving the queue, giving back a
/// grant that may be on its way) before it returns anyway: a signal must end a wait at once
/// even when the store does not answer. What a silent store never hears of ends by itself
/// (queue entries by liveness, leases by TTL).
pub const CANCEL_GRACE: Duration = Duration::from_millis(300);

/// Makes ring rustls's process-wide crypto provider, before any TLS connection. Clients
/// that build their TLS settings without naming a provider (tonic, mysql_async, the
/// ZooKeeper client) take that one; without it rustls guesses from its features, and
/// panics should a dependency ever bring a second provider (aws-lc-rs) beside ring.
pub fn install_crypto_provider() {
    // Without a store that speaks TLS there is no rustls in the build.
    #[cfg(feature = "tls")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // Fails only when another part of the program installed one first: fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
    }
}

/// Milliseconds since the Unix epoch, for stored timestamps.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_description_is_escaped() {
        // A Curator lock node's data is read as its host: arbitrary bytes, a NUL included.
        let lock = LockInfo {
            key: "k".into(),
            owner: "_c_x-lock-0000000001".into(),
            fencing_token: 1,
            holder: Holder {
                host: "10.0.0.1\0\x1b[2J".into(),
                command: "a\nb".into(),
                ..Default::default()
            },
            ttl_left_ms: None,
            depth: 1,
        };
        assert_eq!(
            lock.describe(),
            "_c_x-lock-0000000001 (10.0.0.1\\0\\e[2J pid 0: a\\nb)"
        );
    }
}
