//! What the stores whose locks live in a server session share (PostgreSQL advisory locks,
//! MySQL/MariaDB `GET_LOCK`): which requests such a lock can carry, how long the server
//! is kept from ending a silent session, and the watch that tells `exec` at once when
//! the session is gone.
//!
//! A session lock is released by the server the moment it decides the session is gone
//! (the connection closed, an administrator ended it, a timeout fired), and another client
//! may take it then. So the lease dlock hands to `exec` is the session's life: its TTL is
//! the bound [`Bound`] sets on the server's side, counted from the send time of the last
//! request the session answered, and `exec` kills CMD before that bound as it does before
//! any lease's expiry. A session that ends anyway (terminated, the server restarted) is
//! noticed by the watch [`watch`] spawns, and CMD is killed at once.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::store::LockStore;
use super::{AcquireRequest, Acquired, ReleaseMode};
use crate::error::{Error, Result};

/// How often a held session is looked at for having ended.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Refuses what a session lock cannot carry, in one line before anything is touched:
/// `dlock lock` (the session dies with this process, so the lock cannot outlive it), a
/// priority or a superseding waiter (the server's queue knows neither). `--shared` and
/// `--limit` are refused by the waiting loop ([`super::store::LockStore::supports`]).
pub fn refuse(req: &AcquireRequest, backend: &str, what: &str) -> Result<()> {
    let no = |why: String| {
        Err(Error::Usage(format!(
            "lock '{}': {why} on {backend}",
            req.key
        )))
    };
    if req.detached {
        return no(format!(
            "{what} lives in dlock's own session and cannot outlive it: use `dlock exec`, not `dlock lock`,"
        ));
    }
    if req.queue.priority != 0 {
        return no(format!("--priority is not supported with {what}"));
    }
    if req.queue.supersede {
        return no(format!("--supersede is not supported with {what}"));
    }
    Ok(())
}

/// The server-side limits set on a holder's session so that the server cannot end it (and
/// release its lock) sooner than the TTL after the last thing it heard from us: TCP
/// keepalive that gives up no sooner, and timeouts no shorter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Whole seconds, at least the TTL.
    pub secs: u64,
    /// Keepalive: idle seconds before the first probe, seconds between probes, probes.
    pub idle: u64,
    pub interval: u64,
    pub count: u64,
}

impl Bound {
    /// The bound for a lease of `ttl`: `idle + interval × count ≥ ttl`.
    pub fn for_ttl(ttl: Duration) -> Bound {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let secs = secs.max(2);
        let idle = secs.div_ceil(2);
        let count = 2;
        let interval = (secs - idle).div_ceil(count).max(1);
        Bound {
            secs,
            idle,
            interval,
            count,
        }
    }

    /// The soonest the server's keepalive can end a silent session.
    pub fn keepalive(&self) -> Duration {
        Duration::from_secs(self.idle + self.interval * self.count)
    }
}

/// Kept in [`Acquired::guard`] for a lock held by a session: cancelled when the session
/// has ended, so that `exec` kills CMD at once.
pub struct SessionGuard {
    pub gone: CancellationToken,
    /// Stops the watch when the lock is released.
    _stop: tokio_util::sync::DropGuard,
}

/// The token that fires when the session holding `acquired` ends, if a session holds it.
pub fn gone_of(acquired: &Acquired) -> Option<CancellationToken> {
    let guard = acquired.guard.as_ref()?;
    guard.downcast_ref::<SessionGuard>().map(|g| g.gone.clone())
}

/// Spawns the watch of a held session: `ended` is asked every [`WATCH_EVERY`] and says
/// true once the session is surely gone (closed, terminated), never on mere slowness,
/// which the lease's schedule deals with.
pub fn watch<F, Fut>(mut ended: F) -> SessionGuard
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let gone = CancellationToken::new();
    let stop = CancellationToken::new();
    let (g, s) = (gone.clone(), stop.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = s.cancelled() => return,
                _ = tokio::time::sleep(WATCH_EVERY) => {}
            }
            if ended().await {
                g.cancel();
                return;
            }
        }
    });
    SessionGuard {
        gone,
        _stop: stop.drop_guard(),
    }
}

/// `exec --hold-at-least`: a session lock cannot outlive its session, so dlock keeps the
/// session (and itself) until `left` has passed, then releases.
pub async fn linger<S: LockStore>(store: &S, acquired: Acquired, left: Duration) -> Result<()> {
    tokio::time::sleep(left).await;
    let lease = &acquired.lease;
    store
        .release(&lease.key, &lease.owner, ReleaseMode::All)
        .await?;
    drop(acquired);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_never_shorter_than_the_ttl() {
        for ms in [1u64, 500, 1_000, 1_500, 3_000, 10_000, 30_000, 86_400_000] {
            let ttl = Duration::from_millis(ms);
            let b = Bound::for_ttl(ttl);
            assert!(b.keepalive() >= ttl, "ttl {ms}ms: {b:?}");
            assert!(Duration::from_secs(b.secs) >= ttl, "ttl {ms}ms");
            assert!(b.interval >= 1 && b.idle >= 1);
        }
    }
}
