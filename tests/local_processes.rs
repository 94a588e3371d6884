//! The embedded local store with holders and waiters in other processes (this test binary
//! re-executed): a holder killed by SIGKILL frees the key at once, a stopped waiter does not
//! hold up the queue.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::local::LocalBackend;
use dlock::backend::{Backend, ReleaseMode, WaitInfo, WaitOptions};

use crate::local_backend::{owner_of, store, PROMPT};
use crate::support::{self, bound, forever, no_wait, req};

/// Set in a re-executed copy of this test binary: the directory where `child_holder`
/// takes its lock before waiting to be killed.
const CHILD_ENV: &str = "DLOCK_TEST_HOLDER_DIR";

/// The full name of `child_holder` in the test binary, for `--exact`.
const CHILD_TEST: &str = "local_processes::child_holder";

/// Not a test on its own: when re-executed with `CHILD_ENV`, takes a bound lock on
/// `victim`, saying `QUEUED` on stdout if it has to wait and `HELD <token>` once it holds
/// it, and waits to be killed.
#[test]
fn child_holder() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let b = LocalBackend::open(Path::new(&dir)).unwrap();
        let wait = WaitOptions {
            // The parent may have stopped reading: ignore write errors.
            progress: Some(Arc::new(|_: &WaitInfo| {
                let _ = writeln!(std::io::stdout(), "QUEUED");
            })),
            ..forever()
        };
        let a = b.acquire(&bound("victim", "child"), &wait).await.unwrap();
        let _ = writeln!(std::io::stdout(), "HELD {}", a.lease.fencing_token);
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });
}

/// A re-executed test binary, killed (SIGKILL) and reaped when dropped, so that a failing
/// test never leaves it behind.
struct ChildProc(std::process::Child);

impl ChildProc {
    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.0.id() as i32)
    }

    /// SIGKILL, and wait for it to be gone.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `child_holder` in `dir` and returns it once it printed a line with `word`, and
/// what followed the word.
fn spawn_child(dir: &Path, word: &str) -> (ChildProc, String) {
    let mut child = ChildProc(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("child ended early").unwrap();
        // libtest may print "test child_holder ... " on the same line.
        if let Some((_, rest)) = line.split_once(word) {
            return (child, rest.trim().to_string());
        }
    }
}

#[tokio::test]
async fn holder_killed_by_sigkill_frees_the_key_at_once() {
    let (dir, b) = store();
    let (mut child, token) = spawn_child(dir.path(), "HELD ");
    let token: u64 = token.parse().unwrap();
    let st = b.status(&["victim".into()]).await.unwrap();
    let lock = st[0].lock.as_ref().expect("held by the child");
    assert_eq!(lock.holder.pid, child.0.id());
    assert_eq!(lock.fencing_token, token);
    assert!(b.acquire(&req("victim", "me"), &no_wait()).await.is_err());

    // A waiter is queued behind the child; the TTL is 60 s, yet it gets the key the
    // moment the child dies.
    let (wait, waiting) = support::waiting_forever();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let got = b.acquire(&bound("victim", "me"), &wait).await.unwrap();
            (Instant::now(), got)
        })
    };
    waiting.await.expect("the waiter never waited");
    let killed = Instant::now();
    child.kill();
    let (at, got) = waiter.await.unwrap();
    assert!(at - killed < PROMPT, "{:?}", at - killed);
    assert!(got.lease.fencing_token > token);
}

#[tokio::test]
async fn a_stopped_waiter_does_not_hold_up_the_queue() {
    let (dir, b) = store();
    let a = b.acquire(&bound("victim", "a"), &no_wait()).await.unwrap();
    let (mut child, _) = spawn_child(dir.path(), "QUEUED");
    let pid = child.pid();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    b.release("victim", "a", ReleaseMode::All).await.unwrap();
    drop(a.guard);
    // The stopped waiter is first in line: at first, arrivals queue behind it...
    assert!(b.acquire(&req("victim", "b"), &no_wait()).await.is_err());
    // ...but once the key has stayed free for a second, the next one takes it.
    let t0 = Instant::now();
    let wait = WaitOptions::until(Some(t0 + Duration::from_secs(5)));
    let got = b
        .acquire(&bound("victim", "b"), &wait)
        .await
        .expect("not held up");
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(2500), "{took:?}");
    // Resumed, the waiter finds the key held and keeps waiting.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(owner_of(&b, "victim").await.as_deref(), Some("b"));
    let st = b.status(&["victim".into()]).await.unwrap();
    assert_eq!(st[0].waiters.as_ref().map(Vec::len), Some(1));
    child.kill();
    drop(got);
}
