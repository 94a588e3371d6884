//! Bridging blocking kernel locks and the async world.
//!
//! Nothing here ever blocks the tokio runtime. Critical sections try the state mutex
//! without blocking first (the common, uncontended case runs inline: a handful of
//! syscalls). Anything that may sleep in the kernel (`F_OFD_SETLKW`) runs on a plain,
//! detached OS thread rather than `spawn_blocking`: a thread stuck behind a lock that is
//! held for hours must never keep the runtime (or the process) from shutting down.
//!
//! A wait given up (timeout or cancel) may leave such a thread sleeping in the kernel. It
//! holds nothing meanwhile; when the lock it sleeps on is released it takes it and gives it
//! back at once (a waker only ever *takes and drops* the lock it waits on), or, for the
//! state mutex, sees the shared `Abandoned` flag and drops it without touching the state.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::sync::{mpsc, oneshot};

use super::file::{io_err, Ctx, KeyFile};
use super::locks::{self, Kind, MUTEX};
use super::store::Session;
use crate::backend::WaitOptions;
use crate::error::{Error, Result};

/// Why a wait ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abort {
    Cancelled,
    Deadline,
}

/// The result of a critical section that may be given up while waiting for the mutex.
pub enum Outcome<T> {
    Done(T),
    Abandoned(Abort),
}

/// How long past the deadline we still wait for the *state mutex* (never for the lock
/// itself). The mutex is held for microseconds; this only matters if its holder is stopped
/// (SIGSTOP) mid-section, and keeps `--no-wait` from failing on a mere mutex collision.
const MUTEX_GRACE: Duration = Duration::from_millis(100);

/// Where the slow path of [`locked`] stands, shared with its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Running,
    Abandoned,
}

/// Runs `f` on the state of `kf` with the state mutex held (`kind`), then drops the mutex.
///
/// With `wait`, the wait for the mutex can be cancelled or time out; once `f` has started
/// it always completes, and its result is returned even if the wait was cancelled meanwhile
/// (the caller checks the token afterwards and undoes what must be undone).
///
/// If this future is dropped instead (a caller's `select!`), a wait for the mutex is
/// abandoned, and a result that can no longer be delivered is handed to `undo`, still
/// under the mutex, so that nothing is left held or queued for nobody.
pub async fn locked<T, F, U>(
    ctx: &Arc<Ctx>,
    kf: &Arc<KeyFile>,
    kind: Kind,
    wait: Option<&WaitOptions>,
    f: F,
    undo: U,
) -> Result<Outcome<T>>
where
    F: FnOnce(&mut Session) -> Result<T> + Send + 'static,
    U: FnOnce(&mut Session, T) + Send + 'static,
    T: Send + 'static,
{
    let got =
        locks::try_lock(&kf.file, MUTEX, kind).map_err(|e| io_err("cannot lock", &kf.path, e))?;
    if got {
        return run(ctx, kf, f).map(Outcome::Done);
    }
    let phase = Arc::new(Mutex::new(Phase::Waiting));
    let (tx, mut rx) = oneshot::channel::<Result<T>>();
    {
        let (ctx, kf, phase) = (ctx.clone(), kf.clone(), phase.clone());
        spawn_thread("dlock-state", move || {
            if let Err(e) = locks::lock_wait(&kf.file, MUTEX, kind) {
                let _ = tx.send(Err(io_err("cannot lock", &kf.path, e)));
                return;
            }
            {
                let mut p = phase.lock().unwrap_or_else(PoisonError::into_inner);
                if *p == Phase::Abandoned {
                    let _ = locks::unlock(&kf.file, MUTEX);
                    return;
                }
                *p = Phase::Running;
            }
            match Session::load(&kf, &ctx) {
                Ok(mut s) => match f(&mut s) {
                    Ok(t) => {
                        if let Err(Ok(t)) = tx.send(Ok(t)) {
                            undo(&mut s, t);
                        }
                    }
                    Err(e) => drop(tx.send(Err(e))),
                },
                Err(e) => drop(tx.send(Err(e))),
            }
            let _ = locks::unlock(&kf.file, MUTEX);
        })?;
    }
    let mut abandon_on_drop = AbandonOnDrop(Some(phase.clone()));
    let recv = |r: std::result::Result<Result<T>, oneshot::error::RecvError>| {
        r.unwrap_or_else(|_| Err(Error::Internal("the state lock thread died".into())))
    };
    let Some(wait) = wait else {
        let r = recv((&mut rx).await);
        abandon_on_drop.0 = None;
        return r.map(Outcome::Done);
    };
    let why = tokio::select! {
        r = &mut rx => {
            abandon_on_drop.0 = None;
            return recv(r).map(Outcome::Done);
        }
        why = aborted(wait, MUTEX_GRACE) => why,
    };
    {
        let mut p = phase.lock().unwrap_or_else(PoisonError::into_inner);
        if *p == Phase::Waiting {
            *p = Phase::Abandoned;
            abandon_on_drop.0 = None;
            return Ok(Outcome::Abandoned(why));
        }
    }
    // Already running: it takes microseconds, let it finish.
    let r = recv(rx.await);
    abandon_on_drop.0 = None;
    r.map(Outcome::Done)
}

/// Marks a wait for the mutex abandoned when the future waiting for it is dropped.
struct AbandonOnDrop(Option<Arc<Mutex<Phase>>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if let Some(phase) = &self.0 {
            let mut p = phase.lock().unwrap_or_else(PoisonError::into_inner);
            if *p == Phase::Waiting {
                *p = Phase::Abandoned;
            }
        }
    }
}

/// [`locked`] without cancellation, for release, renew and status: their results need no
/// undoing (a release or renewal that nobody hears of still did the right thing).
pub async fn locked_now<T, F>(ctx: &Arc<Ctx>, kf: &Arc<KeyFile>, kind: Kind, f: F) -> Result<T>
where
    F: FnOnce(&mut Session) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    match locked(ctx, kf, kind, None, f, |_, _| {}).await? {
        Outcome::Done(t) => Ok(t),
        Outcome::Abandoned(_) => unreachable!("no wait options, nothing to abandon"),
    }
}

/// Loads the state, runs `f`, and drops the state mutex whatever happened.
fn run<T>(ctx: &Ctx, kf: &KeyFile, f: impl FnOnce(&mut Session) -> Result<T>) -> Result<T> {
    let r = Session::load(kf, ctx).and_then(|mut s| f(&mut s));
    let _ = locks::unlock(&kf.file, MUTEX);
    r
}

/// Resolves when `wait` is cancelled, or `grace` after its deadline.
pub async fn aborted(wait: &WaitOptions, grace: Duration) -> Abort {
    tokio::select! {
        _ = wait.cancel.cancelled() => Abort::Cancelled,
        _ = sleep_until(wait.deadline.map(|d| d + grace)) => Abort::Deadline,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

fn spawn_thread(name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(256 * 1024)
        .spawn(f)
        .map(drop)
        .map_err(|e| Error::Internal(format!("cannot start a thread: {e}")))
}

/// A thread sleeping in the kernel until the lock byte `at` is released by its holder.
pub struct LockWait {
    pub at: i64,
    rx: oneshot::Receiver<io::Result<()>>,
}

impl LockWait {
    /// Starts waiting for `at` (through `kf`'s open file description). The thread takes the
    /// lock and drops it at once: it is only a wake-up, the decision is made under the mutex.
    ///
    /// With `chain` (our ticket, when `at` is the waiting lock of the waiter just ahead), a
    /// release of `at` that leaves no waiter ahead of us, while a bound holder holds its
    /// holding lock, is not worth a round under the mutex: we are now the head and the
    /// holder's lock is the next one to sleep on, so the thread sleeps on it at once (found
    /// with `F_OFD_GETLK`, no state read). Hand-off down a queue then costs one wake-up of
    /// the waiter, not two. Waking too early is always safe; the decision is still made
    /// under the mutex.
    pub fn start(kf: &Arc<KeyFile>, at: i64, chain: Option<u64>) -> Result<LockWait> {
        let (tx, rx) = oneshot::channel();
        let file: Arc<File> = kf.file.clone();
        spawn_thread("dlock-wait", move || {
            let r = (|| {
                locks::lock_wait(&file, at, Kind::Exclusive)?;
                locks::unlock(&file, at)?;
                let Some(me) = chain else { return Ok(()) };
                if locks::any_waiter_before(&file, me)? {
                    return Ok(());
                }
                if let Some(hold) = locks::last_hold(&file)? {
                    locks::lock_wait(&file, hold, Kind::Exclusive)?;
                    locks::unlock(&file, hold)?;
                }
                Ok(())
            })();
            let _ = tx.send(r);
        })?;
        Ok(LockWait { at, rx })
    }

    /// Resolves when the lock was released (or the wait failed).
    pub async fn released(&mut self) -> io::Result<()> {
        (&mut self.rx)
            .await
            .unwrap_or_else(|_| Err(io::Error::other("lock wait thread died")))
    }
}

/// Wakes when a key file changes: inotify when available, else polling with a backoff
/// from 1 to 20 ms. Only used while a detached lease is held, the one case where no
/// kernel lock tells us that the lease ended.
///
/// The inotify instance is read by a thread in blocking mode (no unsafe fd registration
/// with tokio). Dropping the watch removes it, which makes the kernel queue an
/// `IN_IGNORED` event: the thread wakes up and ends.
pub enum Watch {
    Inotify(InotifyWatch),
    Poll(Duration),
}

/// A live inotify watch and the channel its reader thread reports on.
pub struct InotifyWatch {
    ino: Arc<Inotify>,
    wd: WatchDescriptor,
    rx: mpsc::Receiver<()>,
}

impl Drop for InotifyWatch {
    fn drop(&mut self) {
        let _ = self.ino.rm_watch(self.wd);
    }
}

const POLL_MIN: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(20);

impl Watch {
    /// Watches `path` for writes.
    pub fn new(path: &Path) -> Watch {
        match InotifyWatch::new(path) {
            Ok(w) => Watch::Inotify(w),
            Err(_) => Watch::Poll(POLL_MIN),
        }
    }

    /// Resolves at the next change (or the next poll).
    pub async fn changed(&mut self) {
        match self {
            Watch::Inotify(w) => {
                if w.rx.recv().await.is_none() {
                    *self = Watch::Poll(POLL_MIN);
                }
            }
            Watch::Poll(every) => {
                tokio::time::sleep(*every).await;
                *every = (*every * 2).min(POLL_MAX);
            }
        }
    }
}

impl InotifyWatch {
    fn new(path: &Path) -> Result<InotifyWatch> {
        let fail = |e: Errno| io_err("cannot watch", path, e.into());
        let ino = Arc::new(Inotify::init(InitFlags::IN_CLOEXEC).map_err(fail)?);
        let wd = ino
            .add_watch(
                path,
                AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_ATTRIB | AddWatchFlags::IN_DELETE_SELF,
            )
            .map_err(fail)?;
        let (tx, rx) = mpsc::channel(1);
        let reader = ino.clone();
        spawn_thread("dlock-watch", move || loop {
            match reader.read_events() {
                Ok(events) => {
                    if events
                        .iter()
                        .any(|e| e.mask.contains(AddWatchFlags::IN_IGNORED))
                    {
                        return;
                    }
                    // A full channel already holds a wake-up: coalesce.
                    if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(()) {
                        return;
                    }
                }
                Err(Errno::EINTR) => {}
                Err(_) => return,
            }
        })?;
        Ok(InotifyWatch { ino, wd, rx })
    }
}
