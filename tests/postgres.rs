//! `dlock` on PostgreSQL when things fail or are set up by hand: connections terminated,
//! the server killed under a waiter (its place in the queue), restarted, or frozen before
//! the first answer, wrong passwords, a role that may not run DDL; and readers and
//! semaphores as the key's one row keeps them. (What every store does under a killed,
//! paused or restarted server is the fault matrix, `faults.rs`.)
//! Every error is one line that names the server and never the password.

use std::time::{Duration, Instant};

use crate::support::{
    self, alive, free_port, stderr_of, text, wait_exit, wait_for, Store, PG_PASSWORD,
};

#[test]
fn terminated_connections_reconnect_and_the_lease_holds() {
    let mut store = Store::postgres();
    let dir = tempfile::tempdir().unwrap();
    let (mut dlock, pid) = store.hold("held", "1500ms", dir.path());
    // Every dlock session is cut, again and again, for longer than the TTL.
    let until = Instant::now() + Duration::from_secs(3);
    let mut cuts = 0;
    while Instant::now() < until {
        let cut = store.pg().psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'dlock'",
        );
        cuts += usize::from(cut.parse::<u32>().expect("a count") > 0);
        std::thread::sleep(Duration::from_millis(300));
    }
    // dlock's sessions were there to cut, and were there again once it reconnected.
    assert!(cuts >= 2, "dlock's sessions were cut {cuts} times");
    assert!(alive(pid), "the command must still run: the lease held");
    assert!(store.held("held"));
    support::send_signal(pid, "TERM");
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock ends");
    assert_eq!(status.code(), Some(143), "{}", stderr_of(dlock));
}

#[test]
fn tokens_keep_increasing_across_a_restart() {
    let mut store = Store::postgres();
    let (owner, first) = store.lock_token("t", "1m");
    let out = store
        .dlock()
        .args(["unlock", "t", "--owner", &owner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    store.pg().restart();
    let (_, second) = store.lock_token("t", "1m");
    assert!(second > first, "{first} then {second}");
}

#[test]
fn killed_server_during_a_wait_is_exit_69_and_nothing_is_left() {
    let mut store = Store::postgres();
    let (owner, _) = store.lock_token("w", "1m");
    let mut waiter = store
        .dlock()
        .args(["exec", "w", "--timeout", "4s", "--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let queued = wait_for(Duration::from_secs(10), || {
        store.pg().psql("SELECT count(*) FROM dlock_locks_waiters") == "1"
    });
    assert!(queued, "the waiter queued");
    // A waiter tries to reconnect until its --timeout (a server restarting would be back).
    store.pg().kill();
    let status = wait_exit(&mut waiter, Duration::from_secs(10)).expect("the waiter gives up");
    assert_eq!(status.code(), Some(69));
    let err = stderr_of(waiter);
    let last = err.lines().last().unwrap_or_default().to_string();
    assert!(
        last.contains("postgres://") && !err.contains(PG_PASSWORD),
        "{err}"
    );
    store.pg().restart();
    // The holder's lease is still there; the waiter's place lapses with its liveness.
    assert!(store.held("w"));
    let gone = wait_for(Duration::from_secs(15), || {
        store
            .pg()
            .psql("SELECT count(*) FROM dlock_locks_waiters WHERE alive_until > clock_timestamp()")
            == "0"
    });
    assert!(gone, "the dead waiter's place lapses");
    let out = store
        .dlock()
        .args(["unlock", "w", "--owner", &owner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_server_that_never_answers_is_exit_69_and_holds_nothing() {
    let mut store = Store::postgres();
    store.pg().pause();
    let started = Instant::now();
    let out = store
        .dlock()
        .args(["lock", "frozen", "-n"])
        .output()
        .unwrap();
    let took = started.elapsed();
    store.pg().resume();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    // A progress line says the server is silent; the last one is the error.
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("postgres://") && last.contains("no answer"),
        "{err}"
    );
    assert!(!err.contains(PG_PASSWORD), "{err}");
    assert!(!store.held("frozen"), "nothing held");
}

#[test]
fn unreachable_server_is_exit_69_in_one_line() {
    let url = format!("postgres://u:hidden-pw@127.0.0.1:{}/db", free_port());
    let out = support::exec_true(&url).output().unwrap();
    assert_eq!(out.status.code(), Some(69));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("postgres://") && !err.contains("hidden-pw"),
        "{err}"
    );
}

#[test]
fn wrong_password_is_exit_69_without_the_password_and_pgpassword_works() {
    let store = Store::postgres();
    let Store::Postgres(server) = &store else {
        unreachable!()
    };
    let bad = server.url().replace(PG_PASSWORD, "wrong-secret-9");
    let out = support::exec_true(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(69));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(
        !err.contains("wrong-secret-9") && !err.contains(PG_PASSWORD),
        "{err}"
    );
    let out = support::exec_true(&server.url_without_password())
        .env("PGPASSWORD", PG_PASSWORD)
        .output()
        .unwrap();
    assert!(out.status.success(), "PGPASSWORD is used: {out:?}");
    // The password of the URL reaches neither the command's argv nor its DLOCK_URL.
    let out = support::dlock()
        .args(["exec", "k", "--", "sh", "-c"])
        .arg("tr '\\0' ' ' < /proc/$PPID/cmdline; echo; echo \"$DLOCK_URL\"")
        .env("DLOCK_URL", server.url())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.contains("postgres://"), "{seen}");
    assert!(!seen.contains(PG_PASSWORD), "leaks: {seen}");
}

#[test]
fn a_role_without_ddl_works_on_tables_made_ahead_of_time() {
    let mut store = Store::postgres();
    let names = dlock::backend::postgres::schema::Names::new(Some("ops"), "jobs");
    let pg = store.pg();
    pg.psql("CREATE SCHEMA ops");
    pg.psql(&names.ddl());
    pg.psql("CREATE ROLE worker LOGIN PASSWORD 'worker-pw'");
    pg.psql(&dlock::backend::postgres::schema::grants(&names, "worker"));
    let url = format!(
        "postgres://worker:worker-pw@127.0.0.1:{}/postgres?schema=ops&table=jobs",
        pg.port
    );
    assert_eq!(
        support::token_of(support::dlock().args(["exec", "job", "-u", &url])),
        1
    );
    assert_eq!(pg.psql("SELECT token FROM ops.jobs WHERE key = 'job'"), "1");
    // The same role may not create tables of its own.
    let other = url.replace("table=jobs", "table=other");
    let out = support::dlock()
        .args(["exec", "job", "-u", &other, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
}

/// A waiters table made by a dlock before `--priority` gains the columns on first use, its
/// queued rows in plain arrival order; a role without DDL rights uses it once upgraded
/// with `Names::upgrade` (what docs/stores/postgres.md gives).
#[test]
fn tables_from_before_priorities_are_upgraded() {
    let mut store = Store::postgres();
    let names = dlock::backend::postgres::schema::Names::new(None, "old");
    let pg = store.pg();
    let mut before = names.ddl().replace(&names.upgrade(), "");
    for added in [
        "priority integer NOT NULL DEFAULT 0",
        "superseding boolean NOT NULL DEFAULT false",
        "superseded_by text",
    ] {
        before = before.replace(&format!("  {added},\n"), "");
    }
    assert!(
        !before.contains("priority") && !before.contains("supersed"),
        "{before}"
    );
    pg.psql(&before);
    let url = format!("{}?table=old", pg.url());
    let out = support::dlock()
        .args(["exec", "k", "-u", &url, "--priority", "7", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let column = "SELECT count(*) FROM pg_attribute WHERE attrelid = 'old_waiters'::regclass \
                  AND attname IN ('priority', 'superseding', 'superseded_by')";
    assert_eq!(pg.psql(column), "3");
}

/// 32 processes contend for one key: each holds one connection (the harness's server
/// allows 60), and none fails with exit 69.
#[test]
fn thirty_two_contending_exec_loops_never_overlap() {
    let store = Store::postgres();
    crate::exec::execs_never_overlap(&store, 32, 3);
}

/// `dlock lock KEY FLAGS --json`: the owner and the token.
fn lock_as(store: &Store, key: &str, flags: &[&str]) -> (String, u64) {
    let out = store
        .dlock()
        .args(["lock", key, "--ttl", "1m", "--json"])
        .args(flags)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["owner"].as_str().unwrap().into(),
        v["fencing_token"].as_u64().unwrap(),
    )
}

fn run(store: &Store, args: &[&str]) -> std::process::Output {
    store.dlock().args(args).output().unwrap()
}

/// Readers keep the key's one row (no other column, no other row): each renews and
/// releases its own place, the last one frees the row, and `--force` frees them all.
#[test]
fn readers_live_in_the_key_row_and_each_renews_and_releases_its_own_place() {
    let mut store = Store::postgres();
    let (a, ta) = lock_as(&store, "rw", &["--shared"]);
    let (b, tb) = lock_as(&store, "rw", &["-s"]);
    assert!(tb > ta, "{ta} then {tb}");
    let row = store
        .pg()
        .psql("SELECT owner, depth, token FROM dlock_locks WHERE key = 'rw'");
    assert_eq!(
        row,
        format!("*group*|1|{tb}"),
        "one row, its counter the last token"
    );
    // The row's own owner name is nobody's: it renews and frees no one.
    for verb in ["renew", "unlock"] {
        let out = run(&store, &[verb, "rw", "--owner", "*group*"]);
        assert_eq!(out.status.code(), Some(77), "{out:?}");
    }
    let renewed = run(&store, &["renew", "rw", "--owner", &a, "--ttl", "2m"]);
    assert!(renewed.status.success(), "{renewed:?}");
    let out = run(&store, &["unlock", "rw", "--owner", &b]);
    assert!(out.status.success(), "{out:?}");
    let again = run(&store, &["unlock", "rw", "--owner", &b]);
    assert_eq!(again.status.code(), Some(77), "{again:?}");
    let err = text(&again.stderr);
    assert!(err.contains("'rw'") && err.contains("gone"), "{err}");
    let out = run(&store, &["--json", "status", "rw"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["owner"], a.as_str(), "{st}");
    assert_eq!(st["holders"].as_array().map(Vec::len), Some(1), "{st}");
    let left = st["ttl_left_ms"].as_u64().unwrap();
    assert!(left > 60_000, "renewed to 2m: {st}");
    let out = run(&store, &["unlock", "rw", "--owner", &a]);
    assert!(out.status.success(), "{out:?}");
    let row = store
        .pg()
        .psql("SELECT coalesce(owner, 'free'), depth FROM dlock_locks WHERE key = 'rw'");
    assert_eq!(row, "free|0");
    // A semaphore of two, freed whole by force, its holders named.
    lock_as(&store, "rw", &["--limit", "2"]);
    lock_as(&store, "rw", &["--limit", "2"]);
    let out = run(&store, &["unlock", "rw", "--force"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!store.held("rw"));
    let (_, tx) = lock_as(&store, "rw", &[]);
    assert!(tx > tb + 2, "tokens only grow, whoever holds: {tx}");
}

/// A nested exclusive run of a reader re-enters its place (same owner, same token)
/// instead of waiting for itself.
#[test]
fn a_nested_run_of_a_reader_reenters_its_place() {
    let store = Store::postgres();
    let inner = format!(
        "echo $DLOCK_FENCING_TOKEN; '{}' exec r -- sh -c 'echo $DLOCK_FENCING_TOKEN'",
        support::dlock_bin().display()
    );
    let out = store
        .dlock()
        .args(["exec", "-s", "r", "-w", "10s", "--", "sh", "-c", &inner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen = text(&out.stdout);
    let tokens: Vec<&str> = seen.lines().collect();
    assert_eq!(tokens.len(), 2, "{seen}");
    assert_eq!(tokens[0], tokens[1], "{seen}");
    assert!(!store.held("r"));
}

/// `exec --limit 2 --hold-at-least`: the finished run keeps its place (marked as held) until
/// the hold ends, beside another holder; then the place is free again by itself.
#[test]
fn a_held_run_keeps_its_place_in_a_semaphore_until_the_hold_ends() {
    let store = Store::postgres();
    let (other, _) = lock_as(&store, "sem", &["--limit", "2"]);
    let out = run(
        &store,
        &[
            "exec",
            "sem",
            "--limit",
            "2",
            "--hold-at-least",
            "2s",
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let status = run(&store, &["status", "sem"]);
    let table = text(&status.stdout);
    assert!(table.contains("by --hold-at-least"), "not listed: {table}");
    let full = run(&store, &["exec", "-n", "--limit", "2", "sem", "--", "true"]);
    assert_eq!(full.status.code(), Some(75), "{full:?}");
    let third = run(
        &store,
        &["exec", "-w", "10s", "--limit", "2", "sem", "--", "true"],
    );
    assert!(
        third.status.success(),
        "the held place came back: {third:?}"
    );
    let out = run(&store, &["unlock", "sem", "--owner", &other]);
    assert!(out.status.success(), "{out:?}");
    assert!(!store.held("sem"));
}

/// Several waiters of one process on one backend value (an application's tasks) are each
/// woken by their own notification: every hand-off is prompt, none waits for a heartbeat
/// (a second), whichever of them listened last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_process_are_each_woken_on_their_turn() {
    use dlock::backend::{spec, Backend, ReleaseMode};
    let mut store = Store::postgres();
    let spec = spec::BackendSpec::from_urls(&[store.dlock_url()]).unwrap();
    let b: std::sync::Arc<dyn Backend> = spec::open(&spec).await.unwrap();
    let req = support::req("turns", "first");
    b.acquire(&req, &support::no_wait()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..4 {
        let (b, tx) = (b.clone(), tx.clone());
        tokio::spawn(async move {
            let req = support::req("turns", &format!("w{i}"));
            let got = b.acquire(&req, &support::forever()).await.unwrap();
            tx.send((i, got.lease.owner, Instant::now())).unwrap();
        });
        let queued = wait_for(Duration::from_secs(5), || {
            let sql = "SELECT count(*) FROM dlock_locks_waiters WHERE key = 'turns'";
            store.pg().psql(sql) == (i + 1).to_string()
        });
        assert!(queued, "waiter {i} queued");
    }
    let mut owner = "first".to_string();
    for turn in 0..4 {
        let released = Instant::now();
        b.release("turns", &owner, ReleaseMode::All).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        let (i, next, at) = next.expect("the next waiter got the key").unwrap();
        let took = at - released;
        assert_eq!(i, turn, "served in arrival order");
        assert!(
            took < Duration::from_millis(400),
            "hand-off {turn}: {took:?}"
        );
        owner = next;
    }
    b.release("turns", &owner, ReleaseMode::All).await.unwrap();
}
