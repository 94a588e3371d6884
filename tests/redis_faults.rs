//! `dlock` on Redis when things fail in ways only Redis has: unreachable servers, bad
//! credentials, a run that ends or resumes while the server is gone. (A server killed,
//! paused or restarted under a waiter or a holder is the fault matrix, `faults.rs`.) Every
//! error is one line that names the server and never the password.

use std::time::{Duration, Instant};

use crate::support::{self, alive, free_port, stderr_of, wait_exit, RedisServer, Store};

/// Nobody listens: `-n` tries for the brief ride-out, then one line naming the server.
#[test]
fn unreachable_server_is_exit_69_in_one_line() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let out = support::dlock()
        .args(["exec", "k", "-n", "-u", &url, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&url), "names the server: {err}");
}

#[test]
fn wrong_password_is_exit_69_without_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "right-secret"]);
    let url = format!("redis://:wrong-secret@127.0.0.1:{}", server.port);
    let out = support::dlock()
        .args(["exec", "k", "--", "true"])
        .env("DLOCK_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !err.contains("wrong-secret") && !err.contains("right-secret"),
        "leaks: {err}"
    );
    assert!(
        err.contains(&server.port.to_string()),
        "names the server: {err}"
    );
    // No password at all: refused the same way.
    let out = support::dlock()
        .args(["exec", "k", "-u", &server.url(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
}

#[test]
fn password_from_url_or_rediscli_auth_works_and_stays_out_of_argv() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let out = support::dlock()
        .args([
            "exec",
            "k",
            "--",
            "sh",
            "-c",
            "cat /proc/$$/cmdline; echo; cat /proc/$PPID/cmdline",
        ])
        .env("DLOCK_URL", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("s3cret"));
    let status = support::dlock()
        .args(["exec", "k", "-u", &server.url(), "--", "true"])
        .env("REDISCLI_AUTH", "s3cret")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn status_and_errors_never_show_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "hunter2"]);
    let url = format!("redis://:hunter2@127.0.0.1:{}", server.port);
    let lock = support::dlock()
        .args(["lock", "shown", "--ttl", "1m"])
        .env("DLOCK_URL", &url)
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["status", "shown"],
        &["exec", "shown", "-n", "--", "true"],
    ] {
        let out = support::dlock()
            .args(args)
            .env("DLOCK_URL", &url)
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("hunter2"), "{args:?} leaks: {all}");
        assert!(
            all.contains(&server.port.to_string()),
            "{args:?} names the server: {all}"
        );
    }
}

/// A run that ends while the server is down cannot be left held: dlock warns and exits
/// with the command's code; the lease it could not touch ends by its TTL.
#[test]
fn hold_at_least_with_the_server_gone_warns_and_keeps_the_exit_code() {
    let mut store = Store::redis();
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.01; done; exit 3",
        gate.display()
    );
    let (dlock, _) = support::hold_with(
        store.dlock(),
        "report",
        &["--hold-at-least", "10s"],
        &script,
        dir.path(),
    );
    store.server().kill();
    std::fs::write(&gate, "").unwrap();
    let out = dlock.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not keep 'report' held for --hold-at-least"),
        "{err}"
    );
    // The run's record could not be kept either: one warning each, nothing else.
    assert!(
        err.contains("could not record the run of 'report'"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.lines().all(|l| l.starts_with("dlock: warning: ")),
        "{err}"
    );
}

/// A holder stopped past its lease's deadline resumes while the server is paused: its one
/// short try goes unanswered, so CMD is killed (exit 79). That is a lease lost to the stop,
/// not to a silent store: once the server answers again, the run is recorded as a lost
/// lease (a store that stopped answering while dlock ran is not asked, see `last_run`).
#[test]
fn a_holder_resumed_past_its_deadline_records_its_run_once_the_server_answers() {
    let mut store = Store::redis();
    let dir = tempfile::tempdir().unwrap();
    let (mut dlock, pid) = store.hold("resumed", "1s", dir.path());
    support::send_signal(dlock.id(), "STOP");
    let expired = support::wait_for(Duration::from_secs(10), || {
        let st = store.dlock().args(["status", "resumed"]).output().unwrap();
        st.status.code() == Some(1)
    });
    assert!(expired, "the stopped holder's lease did not expire");
    store.server().pause();
    support::send_signal(dlock.id(), "CONT");
    let killed = support::wait_for(Duration::from_secs(10), || !alive(pid));
    store.server().resume();
    assert!(killed, "the command outlived its lease");
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock ends");
    let err = stderr_of(dlock);
    assert_eq!(status.code(), Some(79), "{err}");
    let out = store
        .dlock()
        .args(["status", "--json", "resumed"])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        st["last_run"]["lease_lost"], true,
        "{st}; dlock said: {err}"
    );
}

/// A holder whose ACL user is deleted on the server (its connection closed with it) meets
/// a refused password when it reconnects to renew: that will not pass, so CMD is killed at
/// that renewal, long before the lease's TTL, and the one line names the key, the server
/// and why (exit 79), never the password.
#[test]
fn a_holder_whose_user_is_deleted_is_killed_at_its_next_renewal() {
    let server = RedisServer::start_with(&["--user", "carol", "on", ">c4r0l", "~*", "&*", "+@all"]);
    let url = format!("redis://carol:c4r0l@127.0.0.1:{}", server.port);
    let dir = tempfile::tempdir().unwrap();
    let mut dlock = support::dlock();
    dlock.env("DLOCK_URL", &url);
    // Renewed every 10 s; a renewal that kept failing would end CMD only near 30 s.
    let (mut dlock, pid) = support::hold_with(
        dlock,
        "revoked",
        &["--ttl", "30s"],
        "exec sleep 60",
        dir.path(),
    );
    let deleted = Instant::now();
    assert_eq!(server.cli(&["ACL", "DELUSER", "carol"]), "1");
    let dead = support::wait_for(Duration::from_secs(20), || !alive(pid));
    assert!(dead, "the command outlived a refused renewal");
    assert!(
        deleted.elapsed() < Duration::from_secs(15),
        "killed at the next renewal, not near the TTL: {:?}",
        deleted.elapsed()
    );
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock ends");
    assert_eq!(status.code(), Some(79));
    let err = stderr_of(dlock);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("'revoked'")
            && last.contains(&server.port.to_string())
            && last.contains("will not pass"),
        "{err}"
    );
    assert!(!err.contains("c4r0l"), "{err}");
}
