//! The queue people can plan around (issue 36), on every backend: the expected wait made
//! from the run history (`status`, `status --json`, the metrics file), a holder past the
//! usual time shown overdue, and `--priority`/`--supersede` refused in one line where the
//! store's queue is not ordered by dlock (see docs/queue.md; `queue_order` where it is).

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, Store};

on_every_backend!(
    the_estimate_comes_from_the_history_and_turns_overdue,
    priority_and_supersede_are_refused_in_one_line,
);

fn exec(store: &Store, key: &str, script: &str) -> Output {
    store
        .dlock()
        .args(["exec", key, "--", "sh", "-c", script])
        .output()
        .unwrap()
}

fn status_json(store: &Store, key: &str) -> Value {
    let out = store
        .dlock()
        .args(["status", "--json", key])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Polls `status --json KEY` until `ready` holds for it, for 10 s at most.
fn status_until(store: &Store, key: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let st = status_json(store, key);
        if ready(&st) {
            return st;
        }
        assert!(Instant::now() < until, "never came: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn the_estimate_comes_from_the_history_and_turns_overdue(store: Store) {
    for ms in ["0.2", "0.3", "0.4"] {
        assert!(exec(&store, "qe", &format!("sleep {ms}")).status.success());
    }
    let st = status_json(&store, "qe");
    let recent: Vec<u64> = st["last_run"]["recent_ms"]
        .as_array()
        .unwrap_or_else(|| panic!("{st}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(recent.len(), 3, "{st}");
    let (low, high) = (recent[0].min(recent[1]), *recent.iter().max().unwrap());
    assert!(low >= 200 && high >= 400, "{recent:?}");

    let dir = tempfile::tempdir().unwrap();
    let (holder, _) = support::hold_with(store.dlock(), "qe", &[], "sleep 60", dir.path());
    let mut holder = support::Reaped(holder);
    let metrics = dir.path().join("qe.prom");
    let waiter = store
        .dlock()
        .args(["exec", "qe", "--metrics-file"])
        .arg(&metrics)
        .args(["--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut waiter = support::Reaped(waiter);
    // Stores without a queue (Redlock, Memcached) list no waiters: the key's own estimate
    // is then in the metrics file only.
    let queued = !status_json(&store, "qe")["waiters"].is_null();
    if queued {
        let st = status_until(&store, "qe", |st| {
            st["waiters"].as_array().is_some_and(|w| !w.is_empty())
        });
        let w = &st["waiters"][0];
        assert_eq!(
            (w["position"].as_u64(), w["priority"].as_i64()),
            (Some(1), Some(0)),
            "{st}"
        );
        let typical = w["estimate"]["typical_ms"]
            .as_u64()
            .unwrap_or_else(|| panic!("{st}"));
        assert!(
            (low..=high).contains(&typical),
            "{typical} not in {low}..={high}: {st}"
        );
        // Held past every recorded run: overdue, and the next waiter goes any moment.
        let st = status_until(&store, "qe", |st| {
            st["waiters"][0]["estimate"]["overdue_ms"].is_u64()
        });
        assert_eq!(st["waiters"][0]["estimate"]["wait_ms"], 0, "{st}");
        let text = support::text(
            &store
                .dlock()
                .args(["status", "qe"])
                .output()
                .unwrap()
                .stdout,
        );
        assert!(
            text.contains("any moment now (runs take ~")
                && text.contains("the holder is overdue by "),
            "{text}"
        );
    } else {
        std::thread::sleep(Duration::from_millis(600));
    }
    support::send_signal(holder.id(), "TERM");
    support::wait_exit(&mut holder, Duration::from_secs(10)).expect("the holder ends");
    let status = support::wait_exit(&mut waiter, Duration::from_secs(20)).expect("the waiter runs");
    assert_eq!(status.code(), Some(0));
    let prom = std::fs::read_to_string(&metrics).unwrap();
    let expected = prom
        .lines()
        .find(|l| l.starts_with("dlock_last_expected_wait_seconds{"))
        .unwrap_or_else(|| panic!("no expected wait in:\n{prom}"));
    let value: f64 = expected.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((0.0..=high as f64 / 1000.0).contains(&value), "{expected}");
}

fn priority_and_supersede_are_refused_in_one_line(store: Store) {
    if store.caps().ordered {
        return kept_where_the_queue_is_ordered(&store);
    }
    for extra in [
        &["--priority", "10"][..],
        &["--supersede"],
        &["--priority", "-1"],
    ] {
        let out = store
            .dlock()
            .args(["exec", "qr"])
            .args(extra)
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("lock 'qr'") && err.contains("is not supported on "),
            "{err}"
        );
        assert!(err.contains(extra[0]), "{err}");
    }
    let out = store
        .dlock()
        .args(["lock", "qr", "--supersede"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let st = status_json(&store, "qr");
    assert_eq!(st["held"], false, "nothing held: {st}");
    assert!(
        st["waiters"].as_array().is_none_or(|w| w.is_empty()),
        "{st}"
    );
    assert!(st["last_run"].is_null(), "nothing ran: {st}");
}

/// The local store, Redis, PostgreSQL and MySQL order their queue (see `queue_order`): both
/// are taken, and a priority out of range
/// is refused by the command line, on every store alike.
fn kept_where_the_queue_is_ordered(store: &Store) {
    let args = [
        "exec",
        "qr",
        "--priority",
        "10",
        "--supersede",
        "--",
        "true",
    ];
    let out = store.dlock().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = store
        .dlock()
        .args(["exec", "qr", "--priority", "1000001", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        err.contains("1000001") && err.contains("--priority"),
        "{err}"
    );
}
