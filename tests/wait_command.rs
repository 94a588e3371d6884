//! `dlock wait` end to end on every backend: a free key, a timeout (75), a release that
//! wakes it (notified or polled, as the store declares), a lease that expires, a signal, a
//! store that cannot be reached.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::job_control::make_unavailable;
use crate::support::{self, text, wait_exit, Store};

on_every_backend!(
    wait_on_a_free_key_returns_at_once_and_times_out_with_75,
    wait_returns_promptly_on_release,
    wait_notices_a_lease_that_expires,
    wait_ends_on_a_signal,
    wait_on_an_unreachable_backend_is_one_line_69,
);

fn wait_on_a_free_key_returns_at_once_and_times_out_with_75(store: Store) {
    let t0 = Instant::now();
    let out = store.dlock().args(["wait", "idle"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(!store.held("idle"), "wait took the key");
    let lock = store
        .dlock()
        .args(["lock", "busy", "--ttl", "60s"])
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    let t0 = Instant::now();
    let out = store
        .dlock()
        .args(["wait", "busy", "--timeout", "700ms"])
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("'busy' is still held by"), "{err}");
    assert!(store.held("busy"), "the holder lost the key");
}

/// What a `dlock -vv wait` said on stderr, each line with when it was read.
type Said = std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>;

/// Starts `dlock -vv wait KEY` and returns once it has seen KEY held, with what it says.
fn start_waiting(store: &Store, key: &str) -> (Child, Said) {
    let mut child = store
        .dlock()
        .args(["-vv", "wait", key])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let waiting = format!("waiting for '{key}' to be free");
    loop {
        let line = lines.next().expect("wait ended without waiting").unwrap();
        if line.contains(&waiting) {
            break;
        }
    }
    let said = Said::default();
    let keep = said.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            keep.lock().unwrap().push((Instant::now(), line));
        }
    });
    (child, said)
}

/// How often `wait` looked at the key again before `at`.
fn looks_before(said: &Said, at: Instant) -> usize {
    let said = said.lock().unwrap();
    said.iter()
        .filter(|(t, l)| *t < at && l.contains("looking at"))
        .count()
}

/// `wait` returns as soon as the holder releases: `unlock` of a `lock`, the end of an
/// `exec`. Where the store notifies (`Store::caps`), it does not look again while nothing
/// changes; the others poll (every 200 ms). (That a notifying store's
/// watch sleeps until told is also `conformance::notified`.)
fn wait_returns_promptly_on_release(store: Store) {
    let caps = store.caps();
    let notified = caps.notified;
    let quiet = Duration::from_millis(700);
    let lock = store
        .dlock()
        .args(["lock", "deploy", "--ttl", "60s"])
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    let (mut waiter, said) = start_waiting(&store, "deploy");
    std::thread::sleep(quiet); // nothing changes meanwhile
    let owner = text(&lock.stdout);
    let unlocking = Instant::now();
    let unlock = store
        .dlock()
        .args(["unlock", "deploy", "--owner", &owner])
        .output()
        .unwrap();
    assert!(unlock.status.success(), "{unlock:?}");
    let released = Instant::now();
    let status = wait_exit(&mut waiter, Duration::from_secs(10)).expect("wait hangs");
    assert_eq!(status.code(), Some(0));
    let late = released.elapsed();
    assert!(
        late < Duration::from_millis(1500),
        "returned {late:?} after unlock"
    );
    let looks = looks_before(&said, unlocking);
    if caps.notified_after_exit {
        assert_eq!(looks, 0, "looked again {looks} times with nothing changed");
    } else {
        assert!(looks >= 1, "polled {looks} times in {quiet:?}");
    }
    // An exec holder: its end is the release (on the local store, of a kernel lock).
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
    let (mut holder, _) = support::hold_with(store.dlock(), "job", &[], &script, dir.path());
    let (mut waiter, said) = start_waiting(&store, "job");
    std::thread::sleep(quiet);
    let ending = Instant::now();
    std::fs::write(&gate, "").unwrap();
    let status = wait_exit(&mut holder, Duration::from_secs(10)).expect("holder hangs");
    assert!(status.success());
    let released = Instant::now();
    let status = wait_exit(&mut waiter, Duration::from_secs(10)).expect("wait hangs");
    assert_eq!(status.code(), Some(0));
    let late = released.elapsed();
    assert!(
        late < Duration::from_millis(1500),
        "returned {late:?} after the exec ended"
    );
    if notified {
        let looks = looks_before(&said, ending);
        assert_eq!(looks, 0, "looked again {looks} times with nothing changed");
    }
}

/// A lease that expires frees the key without a word from anyone: `wait` looks again
/// when it expires (2 s: stores with whole-second TTLs too).
fn wait_notices_a_lease_that_expires(store: Store) {
    let lock = store
        .dlock()
        .args(["lock", "lapse", "--ttl", "3s"])
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    let t0 = Instant::now();
    let out = store.dlock().args(["wait", "lapse"]).output().unwrap();
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // memcached may end an item a second early; whole-second stores a second late.
    assert!(
        took >= Duration::from_millis(1500),
        "returned while held: {took:?}"
    );
    assert!(
        took < Duration::from_millis(5500),
        "slept past the expiry: {took:?}"
    );
}

/// A signal ends a wait at once: 128+N, one line, nothing taken.
fn wait_ends_on_a_signal(store: Store) {
    let lock = store
        .dlock()
        .args(["lock", "sig", "--ttl", "60s"])
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    let mut waiter = store
        .dlock()
        .args(["-v", "wait", "sig"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = waiter.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let first = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("waiting for 'sig'")));
    assert!(first.is_some(), "never waited");
    support::send_signal(waiter.id(), "TERM");
    let status = wait_exit(&mut waiter, Duration::from_secs(5)).expect("wait ignored SIGTERM");
    assert_eq!(status.code(), Some(143));
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        rest.iter().any(|l| l.contains("cancelled by SIGTERM")),
        "{rest:?}"
    );
    let owner = text(&lock.stdout);
    let status = store
        .dlock()
        .args(["--json", "status", "sig"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["owner"].as_str(), Some(owner.as_str()), "{v}");
}

fn wait_on_an_unreachable_backend_is_one_line_69(mut store: Store) {
    let out = make_unavailable(&mut store)
        .args(["wait", "gone"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("waiting for 'gone' to be free"), "{err}");
}
