//! `dlock wait` on the local store: sleeping until a held key may have been freed.
//!
//! A bound lease (`exec`) ends when its holding lock is released, by a release or by the
//! death of its process, and its release writes nothing to the file: only the kernel lock
//! tells, so a thread sleeps on it (as a queued waiter does). A detached lease (`dlock
//! lock`, a run left held by `--hold-at-least`) ends by a write (unlock) or at its expiry:
//! inotify on the key file tells of the one, a timer of the other. The file is watched
//! before the lease is read, so a write in between wakes us at once; `unlock --force` of a
//! bound lease is such a write too.
//!
//! A thread asleep on a kernel lock cannot be called back, so the one started for a holder
//! is kept ([`Kept`]) for the next watch of the same holder: a long wait costs one thread,
//! not one per look.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::select_all;

use super::file::{boot_ms, Ctx, KeyFile};
use super::locks::{hold_lock, Kind};
use super::wait::{self, LockWait, Watch};
use crate::error::Result;

type Wake<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Kernel-lock waits left running by earlier watches: (key file, holder's ticket, wait).
#[derive(Default)]
pub struct Kept(Mutex<Vec<(PathBuf, u64, LockWait)>>);

impl Kept {
    fn take(&self, path: &Path, ticket: u64) -> Option<LockWait> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = kept
            .iter()
            .position(|(p, t, _)| p == path && *t == ticket)?;
        Some(kept.swap_remove(at).2)
    }

    fn keep(&self, path: PathBuf, ticket: u64, lock_wait: LockWait) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push((path, ticket, lock_wait));
    }
}

/// What one key is watched with.
struct Watched {
    path: PathBuf,
    writes: Watch,
    /// A bound holder's ticket and the wait on its holding lock.
    holder: Option<(u64, LockWait)>,
    /// A detached lease's time left.
    expiry: Option<Duration>,
}

/// Returns when one of `keys` may have been freed, or after `pause`.
pub async fn changed(ctx: &Arc<Ctx>, kept: &Kept, keys: &[String], pause: Duration) -> Result<()> {
    let mut watched = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(kf) = KeyFile::open(ctx, key, false, false)? else {
            return Ok(()); // never locked: free
        };
        let kf = Arc::new(kf);
        let writes = Watch::new(&kf.path);
        let lease = wait::locked_now(ctx, &kf, Kind::Shared, |s| s.live_lease()).await?;
        let Some(lease) = lease else {
            return Ok(()); // free now
        };
        let (mut holder, mut expiry) = (None, None);
        if lease.bound {
            let lock_wait = match kept.take(&kf.path, lease.ticket) {
                Some(w) => w,
                None => LockWait::start(&kf, hold_lock(lease.ticket), None)?,
            };
            holder = Some((lease.ticket, lock_wait));
        } else {
            let left = lease.expires_boot_ms.saturating_sub(boot_ms());
            expiry = Some(Duration::from_millis(left));
        }
        let path = kf.path.clone();
        watched.push(Watched {
            path,
            writes,
            holder,
            expiry,
        });
    }
    sleep(&mut watched, pause).await;
    for w in watched {
        if let Some((ticket, lock_wait)) = w.holder {
            kept.keep(w.path, ticket, lock_wait);
        }
    }
    Ok(())
}

/// Sleeps until one of `watched` may have changed, or `pause` ends. A holder whose lock
/// was released is forgotten: its wait has ended.
async fn sleep(watched: &mut [Watched], pause: Duration) {
    let mut wakes: Vec<Wake<'_>> = vec![Box::pin(tokio::time::sleep(pause))];
    let mut released = Vec::new();
    for (i, w) in watched.iter_mut().enumerate() {
        let writes = &mut w.writes;
        wakes.push(Box::pin(async move { writes.changed().await }));
        if let Some(left) = w.expiry {
            wakes.push(Box::pin(tokio::time::sleep(left)));
        }
        if let Some((_, lock_wait)) = &mut w.holder {
            released.push((wakes.len(), i));
            wakes.push(Box::pin(async move {
                let _ = lock_wait.released().await;
            }));
        }
    }
    let (_, woken, _) = select_all(wakes).await;
    if let Some((_, i)) = released.iter().find(|(at, _)| *at == woken) {
        watched[*i].holder = None;
    }
}
