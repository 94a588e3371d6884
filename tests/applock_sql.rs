//! Application locks on SQL servers: `postgres://…?lock=advisory`, where dlock and `psql`
//! (standing for any application) take the same PostgreSQL advisory lock and exclude each
//! other both ways; a wait cancelled leaves nothing queued on the server; the holder's
//! session ended by an administrator, or the server paused past the bound, kills CMD; 8
//! mixed loops never overlap. `applock_mysql` has the same for `GET_LOCK`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{
    self, exec_on, loops, pg_bin, send_signal, stderr_of, wait_exit, wait_for, PostgresServer,
    PG_PASSWORD, PG_USER,
};

fn advisory(pg: &PostgresServer) -> String {
    format!("{}?lock=advisory", pg.url())
}

/// A `psql` session running `commands` (each one `-c`), as an application would.
fn psql(pg: &PostgresServer, commands: &[&str]) -> Command {
    let mut c = Command::new(pg_bin("psql"));
    c.args(["-h", "127.0.0.1", "-p", &pg.port.to_string()])
        .args(["-U", PG_USER, "-d", "postgres", "-XAtq"])
        .env("PGPASSWORD", PG_PASSWORD);
    for command in commands {
        c.args(["-c", command]);
    }
    c.stdin(Stdio::null());
    c
}

/// How many sessions hold (`granted`) or wait for an advisory lock.
fn advisory_locks(pg: &PostgresServer, granted: bool) -> u32 {
    let sql = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted = {granted}"
    );
    pg.psql(&sql).parse().unwrap()
}

/// A `psql` session that holds lock 42 until `gate` is removed.
fn psql_holding(pg: &PostgresServer, lock: &str, gate: &std::path::Path) -> Child {
    std::fs::write(gate, "").unwrap();
    let wait = format!("\\! while [ -e '{}' ]; do sleep 0.05; done", gate.display());
    let child = psql(pg, &[&format!("SELECT pg_advisory_lock({lock})"), &wait])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || advisory_locks(
        pg, true
    ) == 1));
    child
}

#[test]
fn psql_holds_then_dlock_waits_in_the_servers_queue() {
    let pg = PostgresServer::start();
    let url = advisory(&pg);
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let mut holder = psql_holding(&pg, "42", &gate);
    let st = exec_on(&url, &["-n", "42", "--", "true"]).output().unwrap();
    assert_eq!(st.status.code(), Some(75), "{}", support::text(&st.stderr));
    let err = support::text(&st.stderr);
    assert!(err.contains("'42'") && err.contains("foreign"), "{err}");
    let ran = dir.path().join("ran");
    let mut waiter = exec_on(&url, &["42", "--", "touch", ran.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It waits in the server's own queue, not by polling.
    assert!(wait_for(Duration::from_secs(10), || advisory_locks(
        &pg, false
    ) == 1));
    assert!(!ran.exists());
    std::fs::remove_file(&gate).unwrap();
    assert!(holder.wait().unwrap().success());
    let st = wait_exit(&mut waiter, Duration::from_secs(10)).expect("dlock ran after psql");
    assert!(st.success(), "{}", stderr_of(waiter));
    assert!(ran.exists());
    assert!(wait_for(Duration::from_secs(5), || advisory_locks(
        &pg, true
    ) == 0));
}

#[test]
fn dlock_holds_then_psql_try_fails_and_its_blocking_lock_follows() {
    let pg = PostgresServer::start();
    let url = advisory(&pg);
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    std::fs::write(&gate, "").unwrap();
    let wait = format!("while [ -e '{}' ]; do sleep 0.05; done", gate.display());
    let mut held = exec_on(&url, &["nightly", "--", "sh", "-c", &wait])
        .spawn()
        .unwrap();
    let lock = "hashtextextended('nightly', 0)";
    assert!(wait_for(Duration::from_secs(10), || advisory_locks(
        &pg, true
    ) == 1));
    let tried = pg.psql(&format!("SELECT pg_try_advisory_lock({lock})"));
    assert_eq!(tried, "f");
    let status = support::dlock()
        .args(["-u", &url, "status", "nightly"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0));
    let shown = support::text(&status.stdout);
    assert!(
        shown.contains("nightly") && !shown.contains("foreign"),
        "{shown}"
    );
    let app = psql(
        &pg,
        &[&format!("SELECT pg_advisory_lock({lock})"), "SELECT 'got'"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    assert!(wait_for(Duration::from_secs(10), || advisory_locks(
        &pg, false
    ) == 1));
    std::fs::remove_file(&gate).unwrap();
    assert!(wait_exit(&mut held, Duration::from_secs(10))
        .unwrap()
        .success());
    let out = app.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(support::text(&out.stdout).contains("got"));
}

#[test]
fn a_cancelled_wait_leaves_nothing_queued() {
    let pg = PostgresServer::start();
    let url = advisory(&pg);
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let mut holder = psql_holding(&pg, "7,8", &gate);
    let mut waiter = exec_on(&url, &["7,8", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || advisory_locks(
        &pg, false
    ) == 1));
    send_signal(waiter.id(), "INT");
    let st = wait_exit(&mut waiter, Duration::from_secs(5)).expect("the wait ends");
    assert_eq!(st.code(), Some(130));
    assert!(wait_for(Duration::from_secs(5), || advisory_locks(
        &pg, false
    ) == 0));
    std::fs::remove_file(&gate).unwrap();
    assert!(holder.wait().unwrap().success());
    // Nothing of dlock's is left holding it either.
    assert_eq!(advisory_locks(&pg, true), 0);
}

#[test]
fn the_holders_session_terminated_kills_cmd_at_once() {
    let pg = PostgresServer::start();
    loops::session_ended_by_an_administrator(&advisory(&pg), || {
        let ended = pg.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'dlock advisory'",
        );
        assert_eq!(ended, "1");
    });
}

#[test]
fn the_server_paused_past_the_bound_kills_cmd_first() {
    let pg = PostgresServer::start();
    loops::paused_past_the_bound(&advisory(&pg), || pg.pause(), || pg.resume());
}

#[test]
fn lock_and_what_the_server_cannot_carry_are_refused() {
    let pg = PostgresServer::start();
    let url = advisory(&pg);
    for args in [
        vec!["lock", "k"],
        vec!["exec", "--shared", "k", "--", "true"],
        vec!["exec", "--limit", "2", "k", "--", "true"],
    ] {
        let out = support::dlock()
            .args(["-u", &url])
            .args(&args)
            .output()
            .unwrap();
        let err = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("'k'") && err.contains("advisory"), "{err}");
    }
    assert_eq!(advisory_locks(&pg, true) + advisory_locks(&pg, false), 0);
}

#[test]
fn eight_mixed_loops_never_overlap() {
    let pg = PostgresServer::start();
    let dir = tempfile::tempdir().unwrap();
    loops::mixed(&advisory(&pg), "99", &dir.path().join("marks"), |section| {
        format!(
            "PGPASSWORD={PG_PASSWORD} {} -h 127.0.0.1 -p {} -U {PG_USER} -d postgres -XAtq \
             -c 'SELECT pg_advisory_lock(99)' -c {} -c 'SELECT pg_advisory_unlock(99)' >/dev/null",
            pg_bin("psql").display(),
            pg.port,
            loops::quoted(&format!("\\! sh -c {}", loops::quoted(section)))
        )
    });
}
