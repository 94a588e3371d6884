//! Options that no other test reaches, end to end: `wait --json` and `wait -q`, `lock
//! --if-unavailable skip`, a detached `lock --shared` / `--limit N` (on every store that
//! declares sharing), `--no-fair` (on the stores that keep an order a caller may leave),
//! `--kill-after`'s default, and the `DLOCK_URL_FD` descriptor a nested call reads.

// The helpers of the Redis, PostgreSQL and MySQL tests, in a build without those stores.
#![cfg_attr(
    not(all(feature = "redis", feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_imports)
)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, send_signal, text, wait_exit, wait_for, RedisServer, Store};

on_every_backend!(
    wait_json_says_free_or_held_and_quiet_says_nothing,
    lock_if_unavailable_skip_takes_nothing,
    detached_shared_and_limited_locks,
);

fn run(mut dlock: Command, args: &[&str]) -> Output {
    dlock.args(args).stdin(Stdio::null()).output().unwrap()
}

/// The one JSON object of `out`'s stdout.
fn json_of(out: &Output) -> serde_json::Value {
    let line = text(&out.stdout);
    assert_eq!(line.lines().count(), 1, "one object: {out:?}");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// `wait --json` prints one object when the wait ends (free, or still held at the
/// timeout, exit 75); `wait -q` says nothing on either stream.
fn wait_json_says_free_or_held_and_quiet_says_nothing(store: Store) {
    let free = run(store.dlock(), &["--json", "wait", "k"]);
    assert_eq!(free.status.code(), Some(0), "{free:?}");
    let v = json_of(&free);
    assert_eq!(
        (v["key"].as_str(), v["free"].as_bool()),
        (Some("k"), Some(true)),
        "{v}"
    );
    assert!(v["waited_ms"].is_u64() && v["backend"].is_string(), "{v}");
    assert!(free.stderr.is_empty(), "{free:?}");
    let (owner, _) = store.lock_token("k", "60s");
    let held = run(
        store.dlock(),
        &["--json", "wait", "k", "--timeout", "300ms"],
    );
    assert_eq!(held.status.code(), Some(75), "{held:?}");
    let v = json_of(&held);
    assert_eq!(
        (v["key"].as_str(), v["free"].as_bool()),
        (Some("k"), Some(false)),
        "{v}"
    );
    assert!(v["waited_ms"].as_u64().unwrap() >= 300, "{v}");
    let err = text(&held.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&owner), "{err}");
    let quiet = run(store.dlock(), &["-q", "wait", "k", "--timeout", "300ms"]);
    assert_eq!(quiet.status.code(), Some(75), "{quiet:?}");
    assert!(
        quiet.stdout.is_empty() && quiet.stderr.is_empty(),
        "{quiet:?}"
    );
    let unlock = run(store.dlock(), &["unlock", "k", "--owner", &owner]);
    assert!(unlock.status.success(), "{unlock:?}");
    let quiet = run(store.dlock(), &["-q", "wait", "k"]);
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
    assert!(
        quiet.stdout.is_empty() && quiet.stderr.is_empty(),
        "{quiet:?}"
    );
}

/// `lock --if-unavailable skip` with the store gone: no owner printed, the conflict code
/// (75, or `-E`), one line unless `-q`; the default still fails with 69. (`-n`: a store
/// that stays down is given the least ride-out, not 30 s.)
fn lock_if_unavailable_skip_takes_nothing(mut store: Store) {
    let mut dlock = || crate::job_control::make_unavailable(&mut store);
    let skipped = run(dlock(), &["lock", "job", "-n", "--if-unavailable", "skip"]);
    assert_eq!(skipped.status.code(), Some(75), "{skipped:?}");
    assert!(
        skipped.stdout.is_empty(),
        "an owner was printed: {skipped:?}"
    );
    let err = text(&skipped.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("skipped 'job' (--if-unavailable skip)"),
        "{err}"
    );
    let args = [
        "lock",
        "job",
        "-n",
        "--if-unavailable",
        "skip",
        "-q",
        "-E",
        "0",
    ];
    let quiet = run(dlock(), &args);
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
    assert!(
        quiet.stdout.is_empty() && quiet.stderr.is_empty(),
        "{quiet:?}"
    );
    let failed = run(dlock(), &["lock", "job", "-n"]);
    assert_eq!(failed.status.code(), Some(69), "{failed:?}");
}

/// The owner `dlock lock KEY ARGS… --ttl 60s -n` prints, or its exit code when refused.
fn lock_as(store: &Store, key: &str, args: &[&str]) -> Result<String, Option<i32>> {
    let mut all = vec!["lock", key, "--ttl", "60s", "-n"];
    all.extend(args);
    let out = run(store.dlock(), &all);
    match out.status.code() {
        Some(0) => Ok(text(&out.stdout)),
        code => Err(code),
    }
}

/// Two detached readers (`lock --shared`) hold a key together and an exclusive caller is
/// refused; a detached semaphore (`lock --limit 2`) admits two, refuses a third (75) and a
/// caller with another limit (2); `status` lists every holder; `unlock` frees each.
fn detached_shared_and_limited_locks(store: Store) {
    if !store.caps().sharing {
        let refused = lock_as(&store, "s", &["--shared"]);
        assert_eq!(refused, Err(Some(2)), "sharing is not declared here");
        return;
    }
    let readers: Vec<String> = (0..2)
        .map(|_| lock_as(&store, "s", &["--shared"]).expect("a reader"))
        .collect();
    assert_eq!(
        lock_as(&store, "s", &[]),
        Err(Some(75)),
        "a writer beside readers"
    );
    let slots: Vec<String> = (0..2)
        .map(|_| lock_as(&store, "n", &["--limit", "2"]).expect("a slot"))
        .collect();
    assert_eq!(lock_as(&store, "n", &["--limit", "2"]), Err(Some(75)));
    assert_eq!(lock_as(&store, "n", &["--limit", "3"]), Err(Some(2)));
    for (key, owners, sharing) in [
        ("s", &readers, serde_json::json!("shared")),
        ("n", &slots, serde_json::json!({"limit": 2})),
    ] {
        let st = json_of(&run(store.dlock(), &["status", key, "--json"]));
        assert_eq!(st["sharing"], sharing, "{st}");
        let listed: Vec<&str> = st["holders"]
            .as_array()
            .map(|h| h.iter().filter_map(|h| h["owner"].as_str()).collect())
            .unwrap_or_default();
        for owner in owners {
            assert!(listed.contains(&owner.as_str()), "{owner} not in {st}");
        }
        for owner in owners {
            let out = run(store.dlock(), &["unlock", key, "--owner", owner]);
            assert!(out.status.success(), "{out:?}");
        }
        assert!(!store.held(key), "{key} left held");
    }
}

/// A `--no-fair` waiter stays out of the queue (`status` lists nobody while it waits) and
/// takes the key once it is freed.
fn no_fair_waits_outside_the_queue(store: &Store) {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
    let (mut holder, _) = support::hold_with(store.dlock(), "out", &[], &script, dir.path());
    let mut unfair = store
        .dlock()
        .args(["-v", "exec", "out", "--no-fair", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = support::lines_of(unfair.stderr.take().unwrap());
    let waits = std::iter::from_fn(|| lines.recv_timeout(Duration::from_secs(10)).ok())
        .any(|l| l.contains("waiting for 'out'"));
    assert!(waits, "the --no-fair caller never waited");
    let st = json_of(&run(store.dlock(), &["status", "out", "--json"]));
    assert_eq!(st["waiters"], serde_json::json!([]), "queued: {st}");
    std::fs::write(&gate, "").unwrap();
    let ended = wait_exit(&mut holder, Duration::from_secs(10)).expect("the holder ends");
    assert!(ended.success(), "{ended:?}");
    let ran = wait_exit(&mut unfair, Duration::from_secs(10)).expect("the waiter ends");
    assert!(ran.success(), "{ran:?}");
}

/// A caller with `--no-fair` takes a freed key that a fair caller must leave to the head of
/// the queue (a waiter stopped with SIGSTOP, whose place lives on for a while): on the
/// stores where the head of the queue takes a freed key itself (not handed it).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn no_fair_takes_a_key_a_fair_caller_leaves_to_the_queue(store: &Store) {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
    let (mut holder, _) = support::hold_with(store.dlock(), "k", &[], &script, dir.path());
    let mut head = support::Reaped(
        store
            .dlock()
            .args(["exec", "k", "-q", "--", "true"])
            .spawn()
            .unwrap(),
    );
    let queued = wait_for(Duration::from_secs(10), || {
        let out = run(store.dlock(), &["status", "k", "--json"]);
        json_of(&out)["waiters"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
    });
    assert!(queued, "the waiter never queued");
    send_signal(head.id(), "STOP");
    std::fs::write(&gate, "").unwrap();
    let ended = wait_exit(&mut holder, Duration::from_secs(10)).expect("the holder ends");
    assert!(ended.success(), "{ended:?}");
    let fair = run(store.dlock(), &["exec", "k", "-n", "--", "true"]);
    assert_eq!(fair.status.code(), Some(75), "overtook the queue: {fair:?}");
    let unfair = run(
        store.dlock(),
        &["exec", "k", "-n", "--no-fair", "--", "true"],
    );
    assert_eq!(unfair.status.code(), Some(0), "{unfair:?}");
    send_signal(head.id(), "CONT");
    let head = wait_exit(&mut head, Duration::from_secs(20)).expect("the waiter ends");
    assert!(head.success(), "{head:?}");
}

/// Redis hands a freed key to the head of its queue: an unfair caller cannot overtake it.
#[cfg(feature = "redis")]
#[test]
fn no_fair_on_redis() {
    no_fair_waits_outside_the_queue(&Store::redis());
}

#[cfg(feature = "postgres")]
#[test]
fn no_fair_on_postgres() {
    let store = Store::postgres();
    no_fair_waits_outside_the_queue(&store);
    no_fair_takes_a_key_a_fair_caller_leaves_to_the_queue(&store);
}

#[cfg(feature = "mysql")]
#[test]
fn no_fair_on_mysql() {
    let store = Store::mysql();
    no_fair_waits_outside_the_queue(&store);
    no_fair_takes_a_key_a_fair_caller_leaves_to_the_queue(&store);
}

/// Without `--kill-after`, a command that ignores SIGTERM at `--max-runtime` gets SIGKILL
/// 10 s later (the documented default): not before, and not much after.
#[test]
fn kill_after_defaults_to_ten_seconds() {
    let store = Store::local();
    let dir = tempfile::tempdir().unwrap();
    let termed = dir.path().join("termed");
    let script = format!(
        "trap 'touch {}' TERM; while :; do sleep 0.01; done",
        termed.display()
    );
    let (mut dlock, pid) = support::hold_with(
        store.dlock(),
        "slow",
        &["--max-runtime", "1s"],
        &script,
        dir.path(),
    );
    assert!(
        wait_for(Duration::from_secs(10), || termed.exists()),
        "no SIGTERM at --max-runtime"
    );
    let termed_at = Instant::now();
    let status = wait_exit(&mut dlock, Duration::from_secs(30)).expect("dlock ends");
    let after = termed_at.elapsed();
    assert_eq!(status.code(), Some(124), "{status:?}");
    assert!(!support::alive(pid), "the command survived");
    assert!(
        after >= Duration::from_millis(9500) && after < Duration::from_secs(15),
        "SIGKILL {after:?} after SIGTERM"
    );
}

/// `dlock exec` given a password passes its command `DLOCK_URL_FD`: an inherited, sealed
/// in-memory file (not writable), and no such variable without a password. A nested call
/// trusts only that: a descriptor of another kind under the same variable, holding the
/// URL with the password, is not read, and the server refuses the nested call.
#[cfg(feature = "redis")]
#[test]
fn dlock_url_fd_is_a_sealed_memfd_and_nothing_else_is_read() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let show = "echo fd=$DLOCK_URL_FD; readlink /proc/self/fd/$DLOCK_URL_FD; \
                (echo x >> /proc/self/fd/$DLOCK_URL_FD) 2>/dev/null && echo written; true";
    let mut with = support::dlock();
    with.env("DLOCK_URL", &url);
    let out = run(with, &["exec", "k", "--", "sh", "-c", show]);
    assert!(out.status.success(), "{out:?}");
    let said = text(&out.stdout);
    let fd: u32 = said
        .lines()
        .find_map(|l| l.strip_prefix("fd="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no DLOCK_URL_FD: {said}"));
    assert!(fd > 2, "{said}");
    assert!(said.contains("/memfd:dlock-url"), "{said}");
    assert!(
        !said.contains("written"),
        "the descriptor is writable: {said}"
    );
    let local = tempfile::tempdir().unwrap();
    let mut without = support::dlock();
    without.env("DLOCK_DIR", local.path());
    let out = run(
        without,
        &["exec", "k", "--", "sh", "-c", "echo fd=$DLOCK_URL_FD"],
    );
    assert_eq!(text(&out.stdout), "fd=", "{out:?}");
    forged_descriptor_is_not_read(&server, &url);
}

/// A plain file under `DLOCK_URL_FD`, holding the full URL: the nested call gets no password.
fn forged_descriptor_is_not_read(server: &RedisServer, url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let forged = dir.path().join("urls.json");
    std::fs::write(&forged, serde_json::to_string(&[url]).unwrap()).unwrap();
    let out = forged_call(server, &forged);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        text(&out.stderr).contains("authentication required"),
        "{out:?}"
    );
}

/// `dlock exec k -- true` at `server` without a password, with `DLOCK_URL_FD=7` open on
/// `file`.
fn forged_call(server: &RedisServer, file: &Path) -> Output {
    let script = format!("exec 7<'{}'; exec \"$0\" exec k -- true", file.display());
    let mut sh = Command::new("sh");
    sh.args(["-c", &script]).arg(support::dlock_bin());
    for v in dlock::env::INHERITED {
        sh.env_remove(v);
    }
    sh.env("DLOCK_URL", server.url()).env("DLOCK_URL_FD", "7");
    sh.stdin(Stdio::null()).output().unwrap()
}
