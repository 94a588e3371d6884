//! The local store's backend value, and its design.
//!
//! # Files
//!
//! One file per key, `<name>.dlock`, where the name is the key with every byte outside
//! `[A-Za-z0-9._-]` written `%XX` (long keys end in a hash; see `local/names.rs`). Each
//! file holds (see `local/record.rs`) two copies ("slots") of a small JSON record: the key,
//! the fencing counter, its durable ceiling, the boot id, the ticket counter and the lease
//! (owner, token, depth, expiry, holder host/pid/user/command); after them, the list of
//! waiters shown by `status` (at most 128 plain waiters listed; it also carries the
//! priorities of the served order, see below). Files are created whole
//! and atomically (temporary file, fsync, `link`, fsync of the directory) and never
//! deleted: deleting one would restart that key's fencing counter. Stray `.*.tmp` files are
//! left only by a crash during creation and can be removed. Beside the file of each key that
//! `exec` ran under, `<name>.dlock.runs` keeps its last run and last success (`local/runs.rs`).
//!
//! # Locks
//!
//! Every lock is an open-file-description byte-range lock on the key file
//! (`local/locks.rs`): owned by one `open()`, released by the kernel when it is closed,
//! which includes the death of the process, even by SIGKILL. Descriptors are `O_CLOEXEC`,
//! so children never hold them.
//!
//! * the *state mutex* (byte 0) is held for the few microseconds of each read-modify-write
//!   of the record (shared for `status`);
//! * a *waiting lock* per queued waiter (`WAIT_BASE + ticket`), held for the whole wait;
//! * a *holding lock* per bound lease (`HOLD_BASE + ticket`), held by the `exec` process for
//!   as long as it holds the key. It is returned to the caller inside `Acquired.guard`.
//!
//! # Leases
//!
//! A lease taken with `detached == false` (`exec`) is *bound*: it lives exactly as long as
//! its holding lock, so it ends the moment the holder process dies, whatever its TTL. Its TTL
//! is not enforced while the holder lives (it is alive and renews anyway; a *stopped* holder
//! keeps the lock, as with flock(1)); `status` shows no TTL for it (`ttl_left_ms: None`),
//! and renewing it only checks that it is still there. A record claiming a bound lease whose
//! holding lock is free is stale: its holder died or dropped the guard, and the key is free.
//!
//! A detached lease (`dlock lock`) has no process: it ends by release or at its expiry,
//! measured on CLOCK_BOOTTIME (immune to wall-clock steps; carried across a reboot by wall
//! clock).
//!
//! `exec --hold-at-least` turns its bound lease into a detached one with an expiry when CMD
//! ends early (`local/linger.rs`); `dlock wait` sleeps on the holder's lock or on the file
//! (`local/watch.rs`).
//!
//! # Waiting and hand-off: a FIFO of kernel locks
//!
//! A waiter takes a ticket (under the mutex) and holds its waiting lock while it waits. It
//! sleeps in the kernel (`F_OFD_SETLKW`, on its own thread) on the lock of whoever is just
//! ahead of it: the nearest waiter with a lower ticket (found by bisection with
//! `F_OFD_GETLK`), or, at the head of the queue, the holding lock of the bound holder. When
//! that lock is released (release, exit, crash), exactly that one waiter wakes, takes the
//! mutex, and takes the key: hand-off costs one kernel wake-up, with no polling and no
//! thundering herd. (When the waiter ahead is granted the key, the waiter behind it, now
//! the head, goes straight on to sleep on the new holder's lock, found with `F_OFD_GETLK`,
//! without waking the process or taking the mutex: one wake-up per waiter per hand-off.)
//! A waiter that gives up releases its waiting lock and its successor re-targets the next
//! one ahead. New arrivals do not overtake queued waiters when `req.fair` (the default);
//! with `fair == false` an arrival may take a free key at once.
//! While a waiter that asked for `--priority` or `--supersede` is queued, the order is
//! priority first, then ticket, read from the waiter list; each waiter still sleeps on the
//! lock of the one just ahead, in that order (`local/order.rs`).
//! A waiter that leaves a free key untaken for a second (a stopped process, `^Z`) is
//! presumed stuck: whoever comes next may take the key, so one stopped waiter cannot hold
//! up the queue; it keeps its place and waits again when it resumes.
//!
//! Only two cases have no lock to sleep on, and wake by other means: the head of the queue
//! behind a *detached* lease waits for a write to the file (inotify; polling from 1 to 20 ms
//! when inotify is unavailable) or the lease's expiry; and a waiter rechecks now and then
//! (every 250 ms at the head, 1 s behind it) so that `unlock --force` of a bound lease, whose
//! holder process still holds its lock until it notices, does not stall the queue.
//!
//! # Fencing tokens and crash safety
//!
//! Tokens must never repeat, even after a power loss, yet an fsync per acquisition would
//! cost more than the rest of the acquisition together. So the record carries a *ceiling*:
//! before the counter passes it, the ceiling is raised by `CEILING_BLOCK` (1024) and both
//! slots are written and `fdatasync`ed, before the token is handed out. Every token ever
//! handed out is therefore at most a ceiling that reached the disk. Other writes are not
//! synced: they reach the page cache, which every process sees at once, and survive any
//! crash of processes. Only a crash of the kernel (or power) can lose them, and that means
//! a new boot, with a new boot id. A record whose boot id is not the current one, or whose
//! other slot is damaged (a torn write), may be missing writes: its counter is moved up to
//! its ceiling before use, so the next token is above anything handed out before the crash.
//! Tokens may jump by up to a block after a crash; they never go back. (When the boot id
//! cannot be read, every token is synced.)
//!
//! Writes alternate between the two slots, each with a sequence number and a checksum, so
//! one torn write always leaves the previous record intact. A file shorter than both
//! slots, or with both slots damaged, is refused with an internal error naming the file:
//! starting its counter over would hand out tokens again. Not covered: deleting or
//! restoring key files, a store on tmpfs (wiped at boot) or on NFS (the locks are local),
//! and a disk that fails a write-back without a reboot (the kernel may later drop the page).
//!
//! # Sharing and trust
//!
//! When dlock creates the default directory it makes it mode 1777, like `/tmp`, and every
//! key file is created mode 0666 whatever the umask, so that all users of the host can
//! lock the same keys. (A directory given with `DLOCK_DIR` or `file://` is created with
//! the usual permissions; make it 1777 yourself to share it.) The store is for cooperating
//! users: anyone who can write a key file can forge or break its locks, exactly as anyone
//! can with a flock(1) lock file in `/tmp`. Keep private locks in a private directory,
//! and on multi-user hosts create `/var/tmp/dlock` (root, mode 1777) when provisioning, so
//! that no user owns it. Key files are opened without following symbolic links and must be
//! regular files, so a planted link or FIFO is refused instead of written through.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::file::{self, io_err, Ctx, KeyFile};
use super::locks::{self, wait_lock, Kind};
use super::names;
use super::store::{self, Ask, Step};
use super::wait::{self, Abort, Outcome, Watch};
use super::waiter::{HoldGuard, Waiting, Wake};
use super::{linger, runs, shared, watch};
use crate::backend::{
    AcquireRequest, Acquired, Backend, KeyStatus, Lease, Listing, LockInfo, ReleaseMode, Released,
    WaitOptions,
};
use crate::config::{check_key, DEFAULT_DIR};
use crate::error::{Error, Result};

/// Longest owner id we store.
const MAX_OWNER: usize = 256;

/// Locks kept in a directory on this host.
pub struct LocalBackend {
    pub(super) ctx: Arc<Ctx>,
    /// Kernel-lock waits kept between two looks of `dlock wait` (see `local/watch.rs`).
    watching: watch::Kept,
}

impl LocalBackend {
    /// One attempt under the key's state mutex; a grant or a queue place that races the
    /// wait's end is given back by the mutex's clean-up.
    async fn attempt(
        &self,
        kf: &Arc<KeyFile>,
        req: &Arc<AcquireRequest>,
        w: &Waiting,
        wait: &WaitOptions,
        nowait: bool,
    ) -> Result<Outcome<Step>> {
        // The lease's clock starts at the attempt that is granted, not when the wait
        // began: a long wait must not eat into the lease.
        let sent_at = Instant::now();
        let (r, me, want) = (req.clone(), w.ticket, wait.progress.is_some());
        wait::locked(
            &self.ctx,
            kf,
            Kind::Exclusive,
            Some(wait),
            move |s| {
                s.attempt(&Ask {
                    req: &r,
                    me,
                    nowait,
                    sent_at,
                    want_position: want,
                })
            },
            |s, step| match step {
                Step::Granted { lease, hold } => s.undo_grant(&lease, hold),
                Step::Queued { ticket, .. } => s.leave_queue(ticket),
                Step::Busy { .. } | Step::Superseded { .. } => {}
            },
        )
        .await
    }

    /// The error for a wait that was cancelled or ran out of time.
    fn gave_up(&self, key: &str, why: Abort, w: &Waiting, started: Instant) -> Error {
        match why {
            Abort::Cancelled => self.cancelled(key),
            Abort::Deadline => self.not_obtained(key, w.holder.as_ref(), Some(started.elapsed())),
        }
    }

    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<LocalBackend> {
        Self::open_with_boot_id(dir, file::read_boot_id())
    }

    /// Opens the store as if the kernel's boot id were `boot_id`: tests use it to simulate
    /// a reboot. Not for production use.
    #[doc(hidden)]
    pub fn open_with_boot_id(dir: &Path, boot_id: String) -> Result<LocalBackend> {
        ensure_dir(dir)?;
        Ok(LocalBackend {
            ctx: Arc::new(Ctx {
                dir: dir.to_path_buf(),
                boot_id,
                describe: format!("file://{}", dir.display()),
            }),
            watching: watch::Kept::default(),
        })
    }

    /// The path of `key`'s file (which may not exist yet).
    pub fn key_path(&self, key: &str) -> PathBuf {
        self.ctx.dir.join(names::file_name(key))
    }

    pub(super) fn key_file(
        &self,
        key: &str,
        create: bool,
        write: bool,
    ) -> Result<Option<Arc<KeyFile>>> {
        Ok(KeyFile::open(&self.ctx, key, create, write)?.map(Arc::new))
    }

    fn cancelled(&self, key: &str) -> Error {
        Error::cancelled(key, &self.ctx.describe)
    }

    fn not_obtained(
        &self,
        key: &str,
        holder: Option<&LockInfo>,
        waited: Option<Duration>,
    ) -> Error {
        let why = match holder {
            Some(h) => format!("held by {}", h.describe()),
            None => "free but promised to a queued waiter".to_string(),
        };
        Error::not_obtained(key, &self.ctx.describe, &why, waited)
    }

    /// Gives back a lease granted while the wait was being cancelled.
    async fn undo(&self, acquired: Acquired) {
        let lease = &acquired.lease;
        let _ = self
            .release(&lease.key, &lease.owner, ReleaseMode::One)
            .await;
        drop(acquired.guard);
    }

    /// Leaves the queue after giving up: the waiting lock goes at once (that alone takes
    /// us out of the queue); the waiter list is tidied if the mutex is free right now, and
    /// otherwise by the next writer (readers skip dead entries anyway). This uses a fresh
    /// open, as `kf` may still have a thread waiting for the mutex.
    fn leave(&self, kf: &KeyFile, ticket: Option<u64>) {
        let Some(t) = ticket else { return };
        let _ = locks::unlock(&kf.file, wait_lock(t));
        let Ok(fresh) = KeyFile::open_path(&kf.path, kf.key.as_deref()) else {
            return;
        };
        if let Ok(true) = locks::try_lock(&fresh.file, locks::MUTEX, Kind::Exclusive) {
            if let Ok(mut s) = store::Session::load(&fresh, &self.ctx) {
                s.leave_queue(t);
            }
            let _ = locks::unlock(&fresh.file, locks::MUTEX);
        }
    }
}

/// Creates the store directory if missing. The default directory is shared by all users of
/// the host, so it gets mode 1777 (sticky, like /tmp).
fn ensure_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| {
        Error::Unavailable(format!(
            "cannot create lock directory {}: {e}",
            dir.display()
        ))
    };
    match std::fs::create_dir(dir) {
        Ok(()) => {
            if dir == Path::new(DEFAULT_DIR) {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
                    .map_err(fail)?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if dir.is_dir() {
                Ok(())
            } else {
                Err(Error::Unavailable(format!(
                    "lock directory {} is not a directory",
                    dir.display()
                )))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
            match parent {
                Some(p) => std::fs::create_dir_all(p).map_err(fail)?,
                None => return Err(fail(e)),
            }
            match std::fs::create_dir(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(fail(e)),
                _ => ensure_dir(dir),
            }
        }
        Err(e) => Err(fail(e)),
    }
}

/// Checks what the CLI already checks, for library callers.
fn check_request(req: &AcquireRequest) -> Result<()> {
    check_key(&req.key)?;
    if req.owner.is_empty() || req.owner.len() > MAX_OWNER {
        return Err(Error::Usage(format!(
            "the owner id must be 1 to {MAX_OWNER} bytes long"
        )));
    }
    Ok(())
}

#[async_trait]
impl Backend for LocalBackend {
    fn describe(&self) -> String {
        self.ctx.describe.clone()
    }

    async fn acquire(&self, req: &AcquireRequest, wait: &WaitOptions) -> Result<Acquired> {
        check_request(req)?;
        shared::check_limit(&req.key, req.sharing, &self.ctx.describe)?;
        let started = wait.since;
        let nowait = wait.deadline.is_some_and(|d| d <= Instant::now());
        let kf = self
            .key_file(&req.key, true, true)?
            .expect("created when missing");
        let req = Arc::new(req.clone());
        let mut w = Waiting::new(kf.clone());
        if req.queue.supersede {
            // Watched before the first look, so that no mark can slip in between.
            w.bell = Some(Watch::new(&kf.path));
        }
        loop {
            let step = match self.attempt(&kf, &req, &w, wait, nowait).await {
                Ok(Outcome::Done(step)) => step,
                Ok(Outcome::Abandoned(why)) => {
                    self.leave(&kf, w.ticket);
                    return Err(self.gave_up(&req.key, why, &w, started));
                }
                Err(e) => {
                    self.leave(&kf, w.ticket);
                    return Err(e);
                }
            };
            match step {
                Step::Granted { lease, hold } => {
                    let guard = hold.map(|ticket| {
                        Box::new(HoldGuard {
                            kf: kf.clone(),
                            ticket,
                            alone: req.sharing.is_exclusive(),
                        }) as Box<dyn std::any::Any + Send + Sync>
                    });
                    let acquired = Acquired { lease, guard };
                    if wait.cancel.is_cancelled() {
                        self.undo(acquired).await;
                        return Err(self.cancelled(&req.key));
                    }
                    return Ok(acquired);
                }
                Step::Busy { holder } => {
                    return Err(self.not_obtained(&req.key, holder.as_ref(), None));
                }
                Step::Superseded { by } => {
                    w.ticket = None;
                    let describe = &self.ctx.describe;
                    return Err(Error::superseded(&req.key, describe, &by.host, by.pid));
                }
                Step::Queued {
                    ticket,
                    target,
                    info,
                } => {
                    w.ticket = Some(ticket);
                    w.report(wait, &info);
                    w.holder = info.holder;
                    let wake = w.sleep(target, wait).await.inspect_err(|_| {
                        self.leave(&kf, w.ticket);
                    })?;
                    if let Wake::Abort(why) = wake {
                        self.leave(&kf, w.ticket);
                        return Err(self.gave_up(&req.key, why, &w, started));
                    }
                }
            }
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        check_key(key)?;
        let sent_at = Instant::now();
        let Some(kf) = self.key_file(key, false, true)? else {
            return Err(Error::lease_gone("renew", key, &self.ctx.describe));
        };
        let owner = owner.to_string();
        wait::locked_now(&self.ctx, &kf, Kind::Exclusive, move |s| {
            s.renew(&owner, ttl, sent_at)
        })
        .await
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        check_key(key)?;
        let Some(kf) = self.key_file(key, false, true)? else {
            return match mode {
                ReleaseMode::Force => Ok(Released {
                    previous_owner: None,
                    still_held: false,
                }),
                _ => Err(Error::lease_gone("release", key, &self.ctx.describe)),
            };
        };
        let owner = owner.to_string();
        wait::locked_now(&self.ctx, &kf, Kind::Exclusive, move |s| {
            s.release(&owner, mode)
        })
        .await
    }

    /// A bound lease ends with its holding lock: dropping the guard is the whole release,
    /// and the kernel wakes the next waiter at once. The record still names us until the
    /// next writer finds the lease stale and clears it (readers already see it free), as
    /// after a crash; skipping our own read-modify-write takes it off the hand-off's path.
    /// A key held by several is released in the record too: its waiters sleep on the file.
    async fn release_acquired(&self, acquired: Acquired, mode: ReleaseMode) -> Result<()> {
        let Acquired { lease, guard } = acquired;
        let alone = guard
            .as_ref()
            .and_then(|g| g.downcast_ref::<HoldGuard>())
            .is_some_and(|g| g.alone);
        if alone && mode == ReleaseMode::All {
            drop(guard);
            return Ok(());
        }
        let released = self.release(&lease.key, &lease.owner, mode).await;
        drop(guard);
        released.map(drop)
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        if keys.is_empty() {
            let listing = self.list().await?;
            return match listing.unreadable.into_iter().next() {
                Some(e) => Err(e),
                None => Ok(listing.held),
            };
        }
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            check_key(key)?;
            let st = match self.key_file(key, false, false)? {
                Some(kf) => wait::locked_now(&self.ctx, &kf, Kind::Shared, |s| s.status()).await?,
                None => KeyStatus::free(key).with_waiters(Vec::new()),
            };
            out.push(st);
        }
        Ok(out)
    }

    /// Every held key in the directory, sorted by key; a file that cannot be read (damaged,
    /// unreadable) is reported and the others are still listed.
    async fn list(&self) -> Result<Listing> {
        let dir = &self.ctx.dir;
        let entries = std::fs::read_dir(dir).map_err(|e| {
            Error::Unavailable(format!("cannot list lock directory {}: {e}", dir.display()))
        })?;
        let mut listing = Listing::default();
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_str().is_some_and(names::is_key_file) {
                continue;
            }
            match self.status_of_file(&entry.path()).await {
                Ok(Some(st)) if st.lock.is_some() => listing.held.push(st),
                Ok(_) => {}
                Err(e) => listing.unreadable.push(e),
            }
        }
        listing.held.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(listing)
    }

    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        linger::detach(&self.ctx, acquired, left).await
    }

    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        watch::changed(&self.ctx, &self.watching, keys, pause).await
    }

    async fn record_run(&self, key: &str, run: &crate::backend::RunRecord) -> Result<()> {
        check_key(key)?;
        runs::record(&runs::path_for(&self.key_path(key)), key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<crate::backend::LastRuns> {
        check_key(key)?;
        runs::read(&runs::path_for(&self.key_path(key)), key).await
    }
}

impl LocalBackend {
    /// The state of the key kept in the file at `path`; `None` when it vanished.
    async fn status_of_file(&self, path: &Path) -> Result<Option<KeyStatus>> {
        let kf = match KeyFile::open_path(path, None) {
            Ok(kf) => Arc::new(kf),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("cannot open lock file", path, e)),
        };
        wait::locked_now(&self.ctx, &kf, Kind::Shared, |s| s.status())
            .await
            .map(Some)
    }
}
