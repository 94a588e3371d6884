//! When a lease's clock starts, and what a late or slow renewal means, end to end.
//!
//! A lease is timed from the attempt that was granted, never from the start of the wait
//! before it; a lease that cannot expire while its holder lives (the local store's `exec`
//! leases) is never declared lost because a renewal was slow; and a holder that was stopped
//! and resumed learns from the store whether its lease survived.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{read_when_ready, send_signal, wait_exit, wait_for, Store};

on_every_backend!(
    a_long_wait_then_a_contended_renewal_keeps_the_lease,
    a_holder_stopped_past_its_ttl_learns_the_truth,
);

/// `dlock exec KEY --ttl TTL -- sh -c 'echo $$ > READY; SCRIPT'`, quiet, output piped.
fn exec(store: &Store, key: &str, ttl: &str, ready: &Path, script: &str) -> Child {
    store
        .dlock()
        .args(["exec", "-q", key, "--ttl", ttl, "--", "sh", "-c"])
        .arg(format!("echo $$ > '{}'; {script}", ready.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `dlock status KEY --json` in a loop on two threads until the guard is dropped,
/// as the fault run that found the defect did.
struct Pollers(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Pollers {
    fn start(store: &Store, key: &str) -> Pollers {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|_| {
                let mut cmd = store.dlock();
                cmd.args(["status", key, "--json"]).stdout(Stdio::null());
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = cmd.status();
                    }
                })
            })
            .collect();
        Pollers(stop, threads)
    }
}

impl Drop for Pollers {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// Holds the local store's state mutex of `key_file` (shared, as `status` does) for `d`.
fn hold_state_mutex(key_file: &Path, d: Duration) {
    let file = std::fs::File::open(key_file).unwrap();
    let fl = libc::flock {
        l_type: libc::F_RDLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 1,
        l_pid: 0,
    };
    let fd = file.as_raw_fd();
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_OFD_SETLKW(&fl)).unwrap();
    std::thread::sleep(d);
    drop(file);
}

fn exit_of(child: &mut Child, limit: Duration) -> (i32, String) {
    let status = wait_exit(child, limit).expect("dlock did not exit in time");
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), err)
}

/// B waits 2.5 TTLs behind A, then its first renewals meet a busy store (pollers; on the
/// local store the state mutex held for 1.5 TTLs). B's command must run to its end. On
/// ZooKeeper the TTL is a session timeout, and a one-second session under pollers is missed
/// by a JVM server on a loaded machine (exit 79, rightly): it gets three seconds. A SQL
/// server commits each renewal to disk under the pollers' transactions, which on a loaded
/// machine can take most of a one-second TTL (exit 79 again, rightly): two seconds.
fn a_long_wait_then_a_contended_renewal_keeps_the_lease(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (a_ready, b_ready) = (dir.path().join("a"), dir.path().join("b"));
    let k = match store {
        Store::Zookeeper(_) => 3,
        Store::Postgres(_) | Store::Mysql(_) => 2,
        _ => store.slowdown(Duration::from_secs(1)),
    };
    let ttl = format!("{k}s");
    let mut a = exec(
        &store,
        "long-wait",
        &ttl,
        &a_ready,
        &format!("sleep {}", 2.5 * f64::from(k)),
    );
    read_when_ready(&a_ready, Duration::from_secs(10));
    let done = dir.path().join("done");
    let mut b = exec(
        &store,
        "long-wait",
        &ttl,
        &b_ready,
        &format!("sleep {}; echo ok > '{}'", 2 * k, done.display()),
    );
    let pollers = Pollers::start(&store, "long-wait");
    read_when_ready(&b_ready, Duration::from_secs(15) * k);
    if let Store::Local(d) = &store {
        hold_state_mutex(
            &d.path().join("long-wait.dlock"),
            Duration::from_millis(1500),
        );
    }
    let (code, err) = exit_of(&mut b, Duration::from_secs(20) * k);
    drop(pollers);
    assert_eq!(code, 0, "the waiter's command was cut short: {err}");
    assert!(done.exists(), "the command did not run to its end");
    assert_eq!(exit_of(&mut a, Duration::from_secs(10)).0, 0);
}

/// A holder stopped (SIGSTOP) for 2.5 TTLs, then resumed. On the local store its lease is
/// bound to the living process and still held: the command runs on. Elsewhere the lease
/// expired meanwhile (the key is seen free): the resumed holder must find out at once
/// and kill its command (exit 79) instead of running on unprotected.
fn a_holder_stopped_past_its_ttl_learns_the_truth(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (ready, done) = (dir.path().join("ready"), dir.path().join("done"));
    let k = store.slowdown(Duration::from_secs(1));
    let script = format!(
        "sleep {}; echo ok > '{}'",
        5.5 * f64::from(k),
        done.display()
    );
    let mut holder = exec(&store, "stopped", &format!("{k}s"), &ready, &script);
    read_when_ready(&ready, Duration::from_secs(10));
    send_signal(holder.id(), "STOP");
    let expires = !matches!(store, Store::Local(_));
    if expires {
        let free = wait_for(Duration::from_millis(2400) * k, || {
            let st = store.dlock().args(["status", "stopped"]).output().unwrap();
            st.status.code() == Some(1)
        });
        assert!(free, "the stopped holder's lease did not expire");
    }
    std::thread::sleep(Duration::from_millis(2500) * k);
    send_signal(holder.id(), "CONT");
    let (code, err) = exit_of(&mut holder, Duration::from_secs(10));
    if expires {
        assert_eq!(code, 79, "{err}");
        assert!(err.contains("lost the lease on 'stopped'"), "{err}");
        assert!(
            !done.exists(),
            "the command ran on after its lease was lost"
        );
    } else {
        assert_eq!(code, 0, "a bound lease was declared lost: {err}");
        assert!(done.exists());
    }
}

/// Stopped past the renewal deadline but not past the lease's expiry: the store still has
/// the lease, so the resumed holder renews it and its command runs to the end.
#[cfg(feature = "redis")]
#[test]
fn a_holder_stopped_short_of_expiry_keeps_its_lease() {
    let store = Store::redis();
    let dir = tempfile::tempdir().unwrap();
    let (ready, done) = (dir.path().join("ready"), dir.path().join("done"));
    let script = format!("sleep 6; echo ok > '{}'", done.display());
    let mut holder = exec(&store, "short-stop", "6s", &ready, &script);
    read_when_ready(&ready, Duration::from_secs(10));
    send_signal(holder.id(), "STOP");
    // The SIGTERM deadline of a 6 s lease is about 4.6 s after its grant.
    std::thread::sleep(Duration::from_millis(4900));
    send_signal(holder.id(), "CONT");
    let (code, err) = exit_of(&mut holder, Duration::from_secs(15));
    assert_eq!(code, 0, "a lease the server still had was given up: {err}");
    assert!(done.exists());
}
