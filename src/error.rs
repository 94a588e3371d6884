//! The one error type of dlock, and how each kind maps to an exit code.
//!
//! Every message is meant to be printed as one line after `dlock: `, and names the key and
//! the backend where it knows them. Backend descriptions are always redacted (see
//! [`crate::backend::url::redact`]), so no password ever reaches an error.

use std::time::Duration;

use crate::exit;

/// What went wrong, classified by what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command line or value: exit 2.
    #[error("{0}")]
    Usage(String),
    /// The backend cannot be used and trying again will not change that (refused
    /// credentials, a missing database, a protocol mismatch), or a [`Error::Transient`]
    /// failure lasted for the whole time allowed: exit 69.
    #[error("{0}")]
    Unavailable(String),
    /// The store answered with a failure that the next try may well not meet: a lock-wait
    /// timeout, a serialization failure or deadlock, a leader change, a dropped connection
    /// or session that can be made again. The one waiting loop tries again for up to
    /// [`RIDE_OUT`](crate::backend::waiting::RIDE_OUT) within the caller's deadline, and a
    /// holder's renewals within its lease; exit 69 (79 for a holder) only when the failure
    /// lasted that long.
    #[error("{0}")]
    Transient(String),
    /// A bug, or state we cannot trust (corrupt file): exit 70.
    #[error("{0}")]
    Internal(String),
    /// The lock was not obtained in time: exit 75 (or `-E N`).
    #[error("{0}")]
    NotObtained(String),
    /// `renew`/`unlock` by someone who does not hold the lease: exit 77.
    #[error("{0}")]
    NotOwner(String),
    /// The lease was lost while the command ran: exit 79.
    #[error("{0}")]
    LeaseLost(String),
    /// A wait was cancelled by signal N: exit 128+N.
    #[error("{0}")]
    Cancelled(String, i32),
    /// A newer `--supersede` waiter took this one's place in the queue: exit 80.
    #[error("{0}")]
    Superseded(String),
}

impl Error {
    /// The documented exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::Unavailable(_) | Error::Transient(_) => exit::UNAVAILABLE,
            Error::Internal(_) => exit::INTERNAL,
            Error::NotObtained(_) => exit::NOT_OBTAINED,
            Error::NotOwner(_) => exit::NOT_OWNER,
            Error::LeaseLost(_) => exit::LEASE_LOST,
            Error::Cancelled(_, signo) => exit::for_signal(*signo),
            Error::Superseded(_) => exit::SUPERSEDED,
        }
    }

    /// True for a failure that is tried again (see [`Error::Transient`]): a waiter and a
    /// caller still connecting ride it out within their deadline, a holder keeps renewing
    /// through it within its lease. Any other error ends the command at once.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Transient(_))
    }

    /// The same error with its message passed through `f` (adding the key, say), of the
    /// same kind and exit code.
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> Error {
        match self {
            Error::Usage(m) => Error::Usage(f(m)),
            Error::Unavailable(m) => Error::Unavailable(f(m)),
            Error::Transient(m) => Error::Transient(f(m)),
            Error::Internal(m) => Error::Internal(f(m)),
            Error::NotObtained(m) => Error::NotObtained(f(m)),
            Error::NotOwner(m) => Error::NotOwner(f(m)),
            Error::LeaseLost(m) => Error::LeaseLost(f(m)),
            Error::Cancelled(m, n) => Error::Cancelled(f(m), n),
            Error::Superseded(m) => Error::Superseded(f(m)),
        }
    }

    /// The lock was not obtained: `why` says what blocked it (`held by OWNER (…)`);
    /// `waited` is `None` for `--no-wait`. The same words on every backend.
    pub fn not_obtained(key: &str, backend: &str, why: &str, waited: Option<Duration>) -> Error {
        let msg = format!("lock '{key}' is {why} on {backend}");
        Error::NotObtained(match waited {
            None => msg,
            Some(d) => {
                let d = Duration::from_millis(d.as_millis() as u64);
                format!("gave up after {}: {msg}", humantime::format_duration(d))
            }
        })
    }

    /// A store that keeps only exclusive leases, asked for `--shared` or `--limit N`
    /// (`asked`, as the user wrote it): exit 2, nothing touched.
    pub fn sharing_unsupported(key: &str, backend: &str, asked: &str) -> Error {
        Error::Usage(format!(
            "lock '{key}': {asked} is not supported on {backend}"
        ))
    }

    /// A store that cannot order its queue as `asked` (`--priority N`, `--supersede`)
    /// says, for the reason `why`: exit 2, nothing touched.
    pub fn queueing_unsupported(key: &str, backend: &str, asked: &str, why: &str) -> Error {
        Error::Usage(format!(
            "lock '{key}': {asked} is not supported on {backend} ({why})"
        ))
    }

    /// A caller whose `--limit`/`--shared` (`asked`) does not fit how the holders of `key`
    /// hold it (`held`): exit 2, never a silent change of N while holders exist.
    pub fn sharing_conflict(key: &str, backend: &str, held: &str, asked: &str) -> Error {
        Error::Usage(format!(
            "lock '{key}' is held {held} on {backend}, and this caller asked for {asked}: \
             every caller of one key must use the same --limit (exclusive and --shared \
             callers may mix)"
        ))
    }

    /// `renew`/`release` by `owner` of a lease that no longer exists.
    pub fn lease_gone(verb: &str, key: &str, backend: &str) -> Error {
        Error::NotOwner(format!(
            "cannot {verb} lock '{key}' on {backend}: the lease is gone (expired or released)"
        ))
    }

    /// `renew`/`release` by `owner` of a lease someone else holds.
    pub fn held_by_other(verb: &str, key: &str, backend: &str, owner: &str) -> Error {
        Error::NotOwner(format!(
            "cannot {verb} lock '{key}' on {backend}: it is held by another owner, not {owner}"
        ))
    }

    /// Fewer replicas than `?min_replicas` acknowledged a grant (given back) or a
    /// renewal (counted as failed) within `within`.
    pub fn not_replicated(
        verb: &str,
        key: &str,
        backend: &str,
        acked: u64,
        wanted: u32,
        within: Duration,
    ) -> Error {
        let (what, after) = if verb == "acquire" {
            ("the lease", "; it was given back")
        } else {
            ("the renewal", "")
        };
        let within = humantime::format_duration(within);
        Error::Unavailable(format!(
            "cannot {verb} lock '{key}' on {backend}: {acked} of {wanted} replica(s) \
             acknowledged {what} within {within} (min_replicas={wanted}){after}"
        ))
    }

    /// `url` (redacted) names a store this dlock was built without, leaving out the
    /// cargo `feature`: exit 2, nothing opened.
    pub fn built_without(url: &str, store: &str, feature: &str) -> Error {
        Error::Usage(format!(
            "{url}: this dlock was built without the {store} store (cargo feature `{feature}`)"
        ))
    }

    /// A `--supersede` waiter for `key` gave way to a newer one, from `host` pid `pid`:
    /// nothing was run, nothing is left queued.
    pub fn superseded(key: &str, backend: &str, host: &str, pid: u32) -> Error {
        Error::Superseded(format!(
            "gave up waiting for lock '{key}' on {backend}: superseded by a newer waiter \
             from {host} pid {pid}"
        ))
    }

    /// A wait was cancelled; the caller, who knows the signal, fills in its number.
    pub fn cancelled(key: &str, backend: &str) -> Error {
        Error::Cancelled(
            format!("cancelled while waiting for lock '{key}' on {backend}"),
            0,
        )
    }
}

/// An I/O failure of the connection that a new connection may not meet: refused (a server
/// restarting), reset, closed or timed out. Anything else (bad data, a certificate
/// refused) stays.
pub fn passing_io(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | NotConnected
            | BrokenPipe
            | UnexpectedEof
            | TimedOut
            | Interrupted
            | WouldBlock
    )
}

/// The first I/O error in `e`'s chain of sources.
pub fn io_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cur = err.source();
    }
    None
}

/// A connection refused, reset, closed or timed out anywhere in `e`'s chain of sources:
/// on every store, [`Error::Transient`] (a server restarting, a network blip); a refused
/// handshake or password is no I/O failure of this kind.
pub fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    io_error(e).is_some_and(|io| passing_io(io.kind()))
}

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
