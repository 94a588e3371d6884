//! `--priority` and `--supersede` on the stores whose queue dlock orders (see
//! docs/queue.md): a freed key goes to the highest priority, arrival order among equals;
//! a newer `--supersede` waiter makes the older give up at once (exit 80), and leaves the
//! holder and plain waiters alone. The other stores refuse both (`queue::*::priority_*`).

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, Reaped, Store};

/// The stores that order their queue, each with a fresh [`Store`].
macro_rules! on_ordered_stores {
    ($($name:ident),* $(,)?) => {
        mod local {
            $( #[test] fn $name() { super::$name(crate::support::Store::local()); } )*
        }
        #[cfg(feature = "redis")]
        mod redis {
            $( #[test] fn $name() { super::$name(crate::support::Store::redis()); } )*
        }
        #[cfg(feature = "redis")]
        mod redis_cluster {
            $( #[test] fn $name() { super::$name(crate::support::Store::redis_cluster()); } )*
        }
        #[cfg(feature = "mysql")]
        mod mysql {
            $( #[test] fn $name() { super::$name(crate::support::Store::mysql()); } )*
        }
    };
}

on_ordered_stores!(
    the_highest_priority_goes_first_then_arrival_order,
    a_newer_supersede_waiter_replaces_the_older_at_once,
);

/// PostgreSQL (its tables mode; `?lock=advisory` refuses both).
#[cfg(feature = "postgres")]
mod postgres {
    use crate::support::Store;
    #[test]
    fn the_highest_priority_goes_first_then_arrival_order() {
        super::the_highest_priority_goes_first_then_arrival_order(Store::postgres());
    }
    #[test]
    fn a_newer_supersede_waiter_replaces_the_older_at_once() {
        super::a_newer_supersede_waiter_replaces_the_older_at_once(Store::postgres());
    }
}

/// The local store: a ranked waiter killed outright (SIGKILL) leaves the line with its
/// kernel lock, and never holds up the plain waiter behind it.
mod local_only {
    #[test]
    fn a_killed_ranked_waiter_never_blocks_the_key() {
        super::a_killed_ranked_waiter_never_blocks_the_key(crate::support::Store::local());
    }
}

/// The key's waiters as `status --json` lists them, once there are `n`.
fn waiters(store: &Store, key: &str, n: usize) -> Vec<Value> {
    let mut last = Value::Null;
    let came = support::wait_for(Duration::from_secs(10), || {
        let out = store
            .dlock()
            .args(["status", "--json", key])
            .output()
            .unwrap();
        last = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        last["waiters"].as_array().is_some_and(|w| w.len() == n)
    });
    assert!(came, "never {n} waiters: {last}");
    last["waiters"].as_array().unwrap().clone()
}

/// `exec -q KEY EXTRA -- echo NAME >> ran`, its output kept for the test to read (`-q`:
/// its errors only, not the waiting line it shows once it has waited a while).
fn waiter(store: &Store, key: &str, extra: &[&str], name: &str, dir: &Path) -> Reaped {
    let ran = dir.join("ran");
    let child = store
        .dlock()
        .args(["exec", "-q", key])
        .args(extra)
        .args(["--", "sh", "-c"])
        .arg(format!("echo {name} >> '{}'", ran.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Reaped(child)
}

/// A holder that runs until `go` appears in `dir`, then writes `holder` to `ran`.
fn holder(store: &Store, key: &str, dir: &Path) -> Reaped {
    let (go, ran) = (dir.join("go"), dir.join("ran"));
    let script = format!(
        "until [ -e '{}' ]; do sleep 0.02; done; echo holder >> '{}'",
        go.display(),
        ran.display()
    );
    Reaped(support::hold_with(store.dlock(), key, &[], &script, dir).0)
}

fn exit_code(child: &mut Child) -> Option<i32> {
    support::wait_exit(child, Duration::from_secs(20)).and_then(|s| s.code())
}

fn ran(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("ran")).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

fn the_highest_priority_goes_first_then_arrival_order(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut holder = holder(&store, "qp", dir.path());
    let mut queued = Vec::new();
    for (i, (name, priority)) in [("p0", "0"), ("p5a", "5"), ("p5b", "5"), ("p10", "10")]
        .into_iter()
        .enumerate()
    {
        let extra = ["--priority", priority];
        queued.push(waiter(&store, "qp", &extra, name, dir.path()));
        waiters(&store, "qp", i + 1);
    }
    let listed = waiters(&store, "qp", 4);
    let order: Vec<(u64, i64)> = listed
        .iter()
        .map(|w| {
            (
                w["position"].as_u64().unwrap(),
                w["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(order, [(1, 10), (2, 5), (3, 5), (4, 0)], "{listed:?}");
    let text = support::text(
        &store
            .dlock()
            .args(["status", "qp"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(text.contains(", priority 10"), "{text}");

    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(exit_code(&mut holder), Some(0));
    for w in &mut queued {
        assert_eq!(exit_code(w), Some(0));
    }
    assert_eq!(ran(dir.path()), ["holder", "p10", "p5a", "p5b", "p0"]);
}

/// The superseded waiter's one line, after it ended with exit 80 within `within` of `by`
/// showing in the queue.
fn superseded(store: &Store, w: &mut Reaped, by: &Child, within: Duration) -> String {
    let listed = support::wait_for(Duration::from_secs(10), || {
        let out = store
            .dlock()
            .args(["status", "--json", "qs"])
            .output()
            .unwrap();
        let st: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let pids = st["waiters"].as_array().cloned().unwrap_or_default();
        pids.iter()
            .any(|w| w["pid"].as_u64() == Some(u64::from(by.id())))
    });
    assert!(listed, "the newer waiter never queued");
    let since = Instant::now();
    let code = support::wait_exit(w, Duration::from_secs(20)).and_then(|s| s.code());
    let took = since.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut w.0.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(code, Some(80), "{err}");
    assert!(took < within, "gave up after {took:?}, not at once: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("lock 'qs'")
            && err.contains(&format!("superseded by a newer waiter from {}", host()))
            && err.contains(&format!(" pid {}", by.id())),
        "{err}"
    );
    err
}

fn host() -> String {
    let out = std::process::Command::new("hostname").output().unwrap();
    support::text(&out.stdout)
}

fn a_newer_supersede_waiter_replaces_the_older_at_once(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut holder = holder(&store, "qs", dir.path());
    let sup = ["--supersede"];
    let mut first = waiter(&store, "qs", &sup, "s1", dir.path());
    waiters(&store, "qs", 1);
    // A plain waiter keeps its place whatever --supersede waiters come and go.
    let mut plain = waiter(&store, "qs", &[], "plain", dir.path());
    waiters(&store, "qs", 2);
    let mut second = waiter(&store, "qs", &sup, "s2", dir.path());
    // Well within the waiter's one-second heartbeat: it was told, not polling.
    superseded(&store, &mut first, &second, Duration::from_millis(900));
    waiters(&store, "qs", 2);
    let third = waiter(&store, "qs", &sup, "s3", dir.path());
    superseded(&store, &mut second, &third, Duration::from_millis(900));
    let mut third = third;
    let listed = waiters(&store, "qs", 2);
    assert_eq!(listed[0]["position"], 1, "{listed:?}");

    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(
        exit_code(&mut holder),
        Some(0),
        "the holder's run is untouched"
    );
    assert_eq!(exit_code(&mut plain), Some(0));
    assert_eq!(exit_code(&mut third), Some(0));
    assert_eq!(ran(dir.path()), ["holder", "plain", "s3"]);
}

fn a_killed_ranked_waiter_never_blocks_the_key(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut holder = holder(&store, "qk", dir.path());
    let ranked = ["--priority", "10", "--supersede"];
    let mut first = waiter(&store, "qk", &ranked, "ranked", dir.path());
    waiters(&store, "qk", 1);
    let mut plain = waiter(&store, "qk", &[], "plain", dir.path());
    let listed = waiters(&store, "qk", 2);
    assert_eq!(listed[0]["priority"], 10, "{listed:?}");
    support::send_signal(first.id(), "KILL");
    support::wait_exit(&mut first, Duration::from_secs(10)).expect("killed");
    let listed = waiters(&store, "qk", 1);
    assert_eq!(listed[0]["priority"], 0, "{listed:?}");

    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(exit_code(&mut holder), Some(0));
    let since = Instant::now();
    assert_eq!(exit_code(&mut plain), Some(0));
    // Woken by the holder's lock, not by a recheck or the one-second stuck rule.
    assert!(
        since.elapsed() < Duration::from_millis(900),
        "{:?}",
        since.elapsed()
    );
    assert_eq!(ran(dir.path()), ["holder", "plain"]);
}
