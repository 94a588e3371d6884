//! What an acquisition of the local store keeps between attempts, and how it sleeps until
//! the key may have changed; the guard that keeps a bound lease.

use std::sync::Arc;
use std::time::Duration;

use super::file::{io_err, KeyFile};
use super::locks::{self, hold_lock, wait_lock};
use super::store::Target;
use super::wait::{self, Abort, LockWait, Watch};
use crate::backend::{LockInfo, WaitInfo, WaitOptions};
use crate::error::Result;

/// How often the head of the queue rechecks a bound lease (see the module doc).
const RECHECK_HEAD: Duration = Duration::from_millis(250);
/// How often a waiter behind the head rechecks.
const RECHECK: Duration = Duration::from_secs(1);
/// The pause before looking again when the key changed between two probes.
const AGAIN_PAUSE: Duration = Duration::from_millis(1);
/// The guard of a bound lease: its holding lock. Dropping it ends the lease (for waiters,
/// at once) if it was not released before. The lock is dropped explicitly, not by closing
/// the file: an old waker thread may still have the same open file.
pub(super) struct HoldGuard {
    pub(super) kf: Arc<KeyFile>,
    pub(super) ticket: u64,
    /// The lease is exclusive: dropping the guard alone releases it (see
    /// `LocalBackend::release_acquired`).
    pub(super) alone: bool,
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let _ = locks::unlock(&self.kf.file, hold_lock(self.ticket));
    }
}

/// What an acquisition in progress keeps between attempts. Dropping it (the acquisition
/// ended, or its future was dropped) takes us out of the queue.
pub(super) struct Waiting {
    pub(super) kf: Arc<KeyFile>,
    pub(super) ticket: Option<u64>,
    pub(super) lock_wait: Option<LockWait>,
    pub(super) watch: Option<Watch>,
    pub(super) holder: Option<LockInfo>,
    pub(super) reported: Option<Reported>,
    /// A `--supersede` waiter's watch on the key file: the write that marks it superseded
    /// wakes it from any sleep (see `local/order.rs`).
    pub(super) bell: Option<Watch>,
}

/// What the progress listener was last told: holder (owner, token), position, waiters.
type Reported = (Option<(String, u64)>, Option<u64>, Option<u64>);

/// Why the waiting loop goes around again, or stops.
pub(super) enum Wake {
    Again,
    Abort(Abort),
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(t) = self.ticket {
            let _ = locks::unlock(&self.kf.file, wait_lock(t));
        }
    }
}

impl Waiting {
    pub(super) fn new(kf: Arc<KeyFile>) -> Waiting {
        Waiting {
            kf,
            ticket: None,
            lock_wait: None,
            watch: None,
            holder: None,
            reported: None,
            bell: None,
        }
    }

    /// Tells the progress listener, when what we know changed.
    pub(super) fn report(&mut self, wait: &WaitOptions, info: &WaitInfo) {
        let now = (
            info.holder
                .as_ref()
                .map(|h| (h.owner.clone(), h.fencing_token)),
            info.position,
            info.waiters,
        );
        if self.reported.as_ref() != Some(&now) {
            wait.report(info);
            self.reported = Some(now);
        }
    }

    /// Sleeps until `target` says the situation may have changed, or the wait ends.
    pub(super) async fn sleep(&mut self, target: Target, wait: &WaitOptions) -> Result<Wake> {
        let kf = self.kf.clone();
        if wait.cancel.is_cancelled() {
            return Ok(Wake::Abort(Abort::Cancelled));
        }
        if wait.expired() {
            return Ok(Wake::Abort(Abort::Deadline));
        }
        match target {
            Target::Again => {
                // Never a busy loop: a pause that also lets the signal handler run, should
                // the state keep sending us round.
                tokio::time::sleep(AGAIN_PAUSE).await;
                Ok(Wake::Again)
            }
            Target::Lock { at, head } => {
                if self.lock_wait.as_ref().map(|w| w.at) != Some(at) {
                    self.lock_wait = Some(LockWait::start(&kf, at, self.ticket.filter(|_| !head))?);
                }
                let lw = self.lock_wait.as_mut().expect("started");
                let recheck = if head { RECHECK_HEAD } else { RECHECK };
                let released = tokio::select! {
                    why = wait::aborted(wait, Duration::ZERO) => return Ok(Wake::Abort(why)),
                    r = lw.released() => Some(r),
                    _ = rung(&mut self.bell) => None,
                    _ = tokio::time::sleep(recheck) => None,
                };
                if let Some(r) = released {
                    self.lock_wait = None;
                    r.map_err(|e| io_err("cannot wait for a lock on", &kf.path, e))?;
                }
                Ok(Wake::Again)
            }
            Target::Expiry(left) => {
                let Some(watch) = self.watch.as_mut() else {
                    // Watch first, then look again: no change can slip in between.
                    self.watch = Some(Watch::new(&kf.path));
                    return Ok(Wake::Again);
                };
                let nap = left.min(RECHECK) + Duration::from_millis(1);
                tokio::select! {
                    why = wait::aborted(wait, Duration::ZERO) => return Ok(Wake::Abort(why)),
                    _ = watch.changed() => {}
                    _ = tokio::time::sleep(nap) => {}
                }
                Ok(Wake::Again)
            }
        }
    }
}

/// Resolves when the key file changed, if `bell` watches it; never otherwise.
async fn rung(bell: &mut Option<Watch>) {
    match bell {
        Some(watch) => watch.changed().await,
        None => std::future::pending().await,
    }
}
