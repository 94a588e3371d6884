//! `dlock` on MariaDB (the MySQL store) with many clients: the waiters' queue (arrival
//! order, no polling behind the head, a killed or stopped waiter), contending exec loops,
//! semaphore holders, and `dlock wait` woken by the release.

use std::time::{Duration, Instant};

use crate::support::{self, text, wait_exit, wait_for, MysqlServer, Store};

/// The waiters' table keeps arrival order: each waiter is served in turn, woken by the
/// named lock of the one ahead of it (all of them in one process, on one connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order() {
    use dlock::backend::Backend;
    let server = MysqlServer::start();
    let spec = dlock::backend::spec::BackendSpec::from_urls(&[server.url()]).unwrap();
    let b: std::sync::Arc<dyn Backend> = dlock::backend::spec::open(&spec).await.unwrap();
    b.acquire(&support::req("line", "first"), &support::no_wait())
        .await
        .unwrap();
    let queued = |n: usize| {
        let sql = "SELECT COUNT(*) FROM dlock_locks_waiters WHERE lock_key = 'line'";
        server.sql(sql) == n.to_string()
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..6 {
        let (b, tx) = (b.clone(), tx.clone());
        tokio::spawn(async move {
            let req = support::req("line", &format!("w{i}"));
            let got = b.acquire(&req, &support::forever()).await;
            tx.send((i, got.unwrap().lease.owner)).unwrap();
        });
        // Each waiter is queued before the next one starts: a known arrival order.
        let started = Instant::now();
        while !queued(i + 1) {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "waiter {i} queued"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let order = support::served_order(&*b, "line", "first", &mut rx, 6).await;
    assert_eq!(order, (0..6).collect::<Vec<_>>());
    assert!(queued(0));
}

/// The sessions of the test account but the asking one: id → the id of its last query.
fn last_queries(server: &MysqlServer) -> std::collections::BTreeMap<u64, u64> {
    let rows = server.sql(
        "SELECT ID, QUERY_ID FROM information_schema.PROCESSLIST \
         WHERE USER = 'dlock' AND ID <> CONNECTION_ID()",
    );
    let pair = |l: &str| {
        let (id, query) = l.split_once('\t')?;
        Some((id.parse().ok()?, query.parse().ok()?))
    };
    rows.lines().filter_map(pair).collect()
}

/// How many sessions are blocked on a named lock (`GET_LOCK`).
fn blocked_on_named_locks(server: &MysqlServer) -> usize {
    let n =
        server.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'");
    n.parse().unwrap_or(0)
}

/// Starts `dlock exec KEY -- true` and waits until it blocks as the `nth` waiter: its
/// sessions are those that appeared meanwhile.
fn start_blocked_waiter(store: &mut Store, nth: usize) -> (support::Reaped, Vec<u64>) {
    let before = last_queries(store.my());
    let waiter = support::Reaped(
        store
            .dlock()
            .args(["exec", "q", "-q", "--", "true"])
            .spawn()
            .unwrap(),
    );
    let server = store.my();
    let blocked = wait_for(Duration::from_secs(10), || {
        blocked_on_named_locks(server) == nth
    });
    assert!(blocked, "waiter {nth} blocks on a named lock");
    let mine = last_queries(server)
        .into_keys()
        .filter(|id| !before.contains_key(id))
        .collect();
    (waiter, mine)
}

/// With a holder and three waiters, the second and third send the server nothing while
/// they wait (each blocks on the named lock of the one ahead of it): the last query of
/// each of their sessions stays the same for seconds. Then all three run, in turn.
#[test]
fn waiters_behind_the_head_send_no_queries() {
    let mut store = Store::mysql();
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
    let (mut holder, _) = support::hold_with(store.dlock(), "q", &[], &script, dir.path());
    let mut waiters = Vec::new();
    let mut behind = Vec::new();
    for nth in 1..=3 {
        let (waiter, sessions) = start_blocked_waiter(&mut store, nth);
        if nth > 1 {
            assert!(!sessions.is_empty(), "waiter {nth} has sessions");
            behind.extend(sessions);
        }
        waiters.push(waiter);
    }
    let quiet = |seen: &std::collections::BTreeMap<u64, u64>| -> Vec<(u64, u64)> {
        behind
            .iter()
            .map(|id| (*id, seen.get(id).copied().unwrap_or(0)))
            .collect()
    };
    let first = quiet(&last_queries(store.my()));
    std::thread::sleep(Duration::from_secs(3));
    let then = quiet(&last_queries(store.my()));
    assert_eq!(first, then, "sessions of waiters 2 and 3: (id, last query)");
    std::fs::write(&gate, "").unwrap();
    let ended = wait_exit(&mut holder, Duration::from_secs(10)).expect("the holder ends");
    assert!(ended.success(), "{ended:?}");
    for (i, waiter) in waiters.iter_mut().enumerate() {
        let ran = wait_exit(&mut waiter.0, Duration::from_secs(10)).expect("a waiter ends");
        assert!(ran.success(), "waiter {}: {ran:?}", i + 1);
    }
}

/// A waiter killed (SIGKILL) in the middle of the line and a head stopped (SIGSTOP)
/// strand nobody: the one behind them, woken by the death of the one ahead, runs once the
/// stopped head has stayed silent with the key free; the head, resumed, runs too; nothing
/// is left queued.
#[test]
fn a_killed_or_stopped_waiter_strands_nobody_behind_it() {
    let mut store = Store::mysql();
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
    let (mut holder, _) = support::hold_with(store.dlock(), "q", &[], &script, dir.path());
    let mut waiters: Vec<_> = (1..=3)
        .map(|nth| start_blocked_waiter(&mut store, nth).0)
        .collect();
    support::send_signal(waiters[0].0.id(), "STOP");
    support::send_signal(waiters[1].0.id(), "KILL");
    std::fs::write(&gate, "").unwrap();
    assert!(wait_exit(&mut holder, Duration::from_secs(10)).is_some_and(|s| s.success()));
    let ran = wait_exit(&mut waiters[2].0, Duration::from_secs(25)).expect("the third ends");
    assert!(ran.success(), "{ran:?}");
    support::send_signal(waiters[0].0.id(), "CONT");
    let ran = wait_exit(&mut waiters[0].0, Duration::from_secs(15)).expect("the head ends");
    assert!(ran.success(), "{ran:?}");
    let left = store.my().sql("SELECT COUNT(*) FROM dlock_locks_waiters");
    assert_eq!(left, "0", "nothing is left queued");
}

/// 32 processes contend for one key, each re-checking on its own schedule: none fails with
/// exit 69 (a deadlock or a lock wait timeout), and no two commands overlap.
#[test]
fn thirty_two_contending_exec_loops_never_overlap() {
    let store = Store::mysql();
    crate::exec::execs_never_overlap(&store, 32, 3);
}

/// `dlock … --json` as a JSON value (exit code beside it).
fn json_of(store: &Store, args: &[&str], owner: Option<&str>) -> (Option<i32>, serde_json::Value) {
    let mut cmd = store.dlock();
    if let Some(owner) = owner {
        cmd.env("DLOCK_OWNER", owner);
    }
    let out = cmd.args(args).output().unwrap();
    let line = text(&out.stdout);
    let v = serde_json::from_str(line.lines().next().unwrap_or("null")).unwrap_or_default();
    (out.status.code(), v)
}

/// Semaphore holders in the key's one row: each renews, re-enters and leaves on its own,
/// the last one out frees the key, and `unlock --force` frees every holder at once.
#[test]
fn semaphore_holders_renew_reenter_and_leave_one_by_one() {
    let mut store = Store::mysql();
    let lock = ["lock", "sem", "--limit", "3", "--ttl", "1m", "--json"];
    let (_, a) = json_of(&store, &lock, None);
    let (_, b) = json_of(&store, &lock, None);
    let (a, b) = (a["owner"].as_str().unwrap(), b["owner"].as_str().unwrap());
    let owner = store
        .my()
        .sql("SELECT owner FROM dlock_locks WHERE lock_key = 'sem'");
    assert_eq!(owner, "*group*", "one row keeps the group");
    let (code, renewed) = json_of(
        &store,
        &["renew", "sem", "--owner", b, "--ttl", "2m", "--json"],
        None,
    );
    assert_eq!(
        (code, renewed["ttl_ms"].as_u64()),
        (Some(0), Some(120_000)),
        "{renewed}"
    );
    // A nested lock of A re-enters A's place with A's token: two levels to leave.
    let (code, again) = json_of(
        &store,
        &["lock", "sem", "--limit", "3", "-n", "--json"],
        Some(a),
    );
    assert_eq!(
        (code, again["owner"].as_str()),
        (Some(0), Some(a)),
        "{again}"
    );
    assert_eq!(again["reentered"], true, "{again}");
    let (_, st) = json_of(&store, &["status", "sem", "--json"], None);
    let holders = st["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{st}");
    assert_eq!(
        (holders[0]["owner"].as_str(), holders[0]["depth"].as_u64()),
        (Some(a), Some(2))
    );
    let unlock = |owner: &str| json_of(&store, &["unlock", "sem", "--owner", owner], None).0;
    assert_eq!(unlock(a), Some(0));
    assert_eq!(unlock(a), Some(0));
    assert_ne!(unlock(a), Some(0), "A has left");
    let (_, st) = json_of(&store, &["status", "sem", "--json"], None);
    assert_eq!(st["owner"].as_str(), Some(b), "{st}");
    assert_eq!(unlock(b), Some(0));
    assert!(!store.held("sem"), "the last holder out frees the key");
    // Forced: every holder goes at once, and the next grant's token is newer.
    json_of(&store, &lock, None);
    json_of(&store, &lock, None);
    let (code, _) = json_of(&store, &["unlock", "sem", "--force"], None);
    assert_eq!(code, Some(0));
    assert!(!store.held("sem"));
    let (_, next) = json_of(&store, &["lock", "sem", "--ttl", "1m", "--json"], None);
    assert_eq!(next["fencing_token"].as_u64(), Some(5), "{next}");
}

/// `exec --hold-at-least` of a shared holder leaves its own place held after the run, marked
/// as such: readers still join, a writer still waits.
#[test]
fn a_shared_run_held_at_least_keeps_its_place() {
    let store = Store::mysql();
    let run = |args: &[&str]| store.dlock().args(args).output().unwrap();
    let out = run(&["exec", "-s", "--hold-at-least", "30s", "rep", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    let (code, st) = json_of(&store, &["status", "rep", "--json"], None);
    assert_eq!(code, Some(0), "{st}");
    assert!(st["held_until_ms"].as_u64().is_some(), "{st}");
    assert_eq!(st["sharing"], "shared", "{st}");
    assert_eq!(
        run(&["exec", "-n", "-s", "rep", "--", "true"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        run(&["exec", "-n", "rep", "--", "true"]).status.code(),
        Some(75)
    );
}

/// Starts `dlock -v wait KEY` and returns once it has said that it waits.
fn start_waiting(store: &Store, key: &str) -> support::Reaped {
    let mut child = store.dlock();
    child.args(["-v", "wait", key, "--timeout", "30s"]);
    let mut waiter = support::Reaped(child.stderr(std::process::Stdio::piped()).spawn().unwrap());
    let stderr = waiter.0.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok);
    assert!(
        lines.any(|l| l.contains("waiting for")),
        "wait never waited"
    );
    std::thread::spawn(move || lines.for_each(drop));
    waiter
}

/// `dlock wait` behind a holder in another process (the library, as an application holds
/// a key) wakes on that holder's named lock, not on a poll (every 200 ms): when the
/// release comes while `wait` is still starting (its first look at the named lock finds
/// the key free already) and when it comes once `wait` is blocked in the server.
#[test]
fn dlock_wait_wakes_on_the_release_not_on_a_poll() {
    use dlock::backend::{spec, Backend, ReleaseMode};
    let mut store = Store::mysql();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let spec = spec::BackendSpec::from_urls(&[store.dlock_url()]).unwrap();
    let b: std::sync::Arc<dyn Backend> = rt.block_on(spec::open(&spec)).unwrap();
    for blocked_first in [false, true] {
        let mut took = Vec::new();
        for round in 0..5 {
            let owner = format!("app{round}");
            let req = support::req("w", &owner);
            rt.block_on(b.acquire(&req, &support::no_wait())).unwrap();
            let mut waiter = start_waiting(&store, "w");
            if blocked_first {
                let blocked = wait_for(Duration::from_secs(10), || {
                    blocked_on_named_locks(store.my()) == 1
                });
                assert!(blocked, "dlock wait blocks on the holder's named lock");
            }
            let released = Instant::now();
            rt.block_on(b.release("w", &owner, ReleaseMode::All))
                .unwrap();
            let ended = wait_exit(&mut waiter.0, Duration::from_secs(10)).expect("wait ends");
            took.push(released.elapsed());
            assert!(ended.success(), "{ended:?}");
        }
        took.sort();
        // A poll would take 200 ms every time; a wake-up takes a few, even on a busy machine.
        let median = took[took.len() / 2];
        assert!(
            median < Duration::from_millis(120),
            "blocked first: {blocked_first}: {took:?}"
        );
    }
}
