//! The fault matrix: each fault a store's server can suffer, written once and run on every
//! store it applies to (`on_every_server!`, from the backend list of `macros.rs`), through
//! the one [`Server`](crate::support::Server) trait. A quorum's servers all suffer it.
//!
//! - down when `exec` starts: it keeps trying for its `--timeout`, runs the command when
//!   the servers come back in time, and exits 69 at the end of it when they do not;
//! - down when `unlock` and `status` start: they keep trying to reach the store for the
//!   least ride-out (the release itself is sent once), whichever store connects lazily;
//! - killed while clients wait: they give up at the end of the wait allowed, exit 69, in
//!   one line that names the key and never the password;
//! - killed, or paused past the TTL, while `exec` holds: CMD is dead before the lease can
//!   expire on the server, exit 79;
//! - restarted while `exec` holds: what the store declares (`Caps::durable`): the holder
//!   renews on, or finds the lease gone (exit 79).
//!
//! What only one store can be asked under a fault stays in that store's file.

// A build with no store that has servers (`--no-default-features`) runs none of these.
#![cfg_attr(not(servers), allow(dead_code, unused_imports))]

use std::process::{Child, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::support::{self, alive, lines_of, now_ms, stderr_of, wait_exit, Reaped, Store};

on_every_server!(
    down_at_the_start_and_back_in_time_runs_the_command,
    down_for_the_whole_timeout_is_69_at_its_end,
    down_when_unlock_and_status_start_is_ridden_out_briefly,
    killed_while_waiting_is_69_at_the_end_of_the_wait,
    killed_while_holding_kills_the_command_in_time,
    paused_past_the_ttl_while_holding_kills_the_command_in_time,
    restarted_while_holding_is_what_the_store_declares,
);

/// How long a waiter of these tests may wait.
const ALLOWED: Duration = Duration::from_secs(4);

/// A lease these tests hold, at least three of the store's TTL units (whole seconds on
/// some stores) and at least `shortest`.
fn lease(store: &Store, shortest: Duration) -> Duration {
    shortest.max(store.ttl_unit() * 3)
}

/// A waiter started with `args` and `-v`, once it says it waits for `key`; and its stderr.
fn waiter(store: &Store, args: &[&str], key: &str) -> (Reaped, Receiver<String>) {
    saying(store, args, &format!("waiting for '{key}'"))
}

/// What a command says when it cannot reach its store and keeps trying.
const TRYING: &str = "trying again for up to";

/// `dlock -v ARGS`, once it has said `what` on stderr; and its stderr.
fn saying(store: &Store, args: &[&str], what: &str) -> (Reaped, Receiver<String>) {
    let mut child = Reaped(
        store
            .dlock()
            .arg("-v")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(what) => break,
            Ok(_) => {}
            Err(e) => panic!("{args:?} never said {what:?} ({e})"),
        }
    }
    (child, lines)
}

/// What a finished child said on stderr after the lines already read.
fn rest(lines: Receiver<String>) -> Vec<String> {
    lines.iter().collect()
}

/// Exit 69 no later than a little after the wait allowed, timed from `from`; the last line
/// (the error) names the key and the store's scheme, and no line shows the password.
fn gave_up(store: &Store, waiter: (Reaped, Receiver<String>), key: &str, from: Instant) {
    let (mut child, lines) = waiter;
    let status = wait_exit(&mut child, ALLOWED + Duration::from_secs(10));
    let took = from.elapsed();
    let said = rest(lines);
    let status = status.unwrap_or_else(|| panic!("the waiter never gave up: {said:?}"));
    assert_eq!(status.code(), Some(69), "{said:?}");
    assert!(
        took < ALLOWED + Duration::from_secs(4),
        "{took:?}: {said:?}"
    );
    let last = said.last().map(String::as_str).unwrap_or_default();
    let url = store.dlock_url();
    let scheme = &url[..url.find("://").expect("a URL")];
    assert!(
        last.contains(&format!("'{key}'")) && last.contains(scheme),
        "the error names the key and the store: {said:?}"
    );
    if let Some(password) = store.password() {
        assert!(!said.iter().any(|l| l.contains(password)), "{said:?}");
    }
}

/// `exec` started while every server of the store is down keeps trying within its
/// `--timeout`; the servers come back, and it takes the key and runs the command.
fn down_at_the_start_and_back_in_time_runs_the_command(mut store: Store) {
    for server in store.servers() {
        server.kill();
    }
    let mut child = Reaped(
        store
            .dlock()
            .args(["-v", "exec", "late", "--timeout", "60s", "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(child.stderr.take().unwrap());
    let trying = Instant::now() + Duration::from_secs(15);
    loop {
        let left = trying.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("trying again for up to") => break,
            Ok(_) => {}
            Err(e) => panic!("exec never said it tries again ({e})"),
        }
    }
    for server in store.servers() {
        server.restart();
    }
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let said = rest(lines);
    let status = status.unwrap_or_else(|| panic!("exec never ran the command: {said:?}"));
    assert_eq!(status.code(), Some(0), "{said:?}");
}

/// `exec --timeout` against a store whose every server stays down: exit 69 about the
/// timeout after it started (never before), in a last line that names the key and the
/// store and no line that shows the password.
fn down_for_the_whole_timeout_is_69_at_its_end(mut store: Store) {
    for server in store.servers() {
        server.kill();
    }
    let timeout = format!("{}ms", ALLOWED.as_millis());
    let started = Instant::now();
    let out = store
        .dlock()
        .args(["exec", "gone", "--timeout", &timeout, "--", "true"])
        .output()
        .unwrap();
    let took = started.elapsed();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(69), "{said}");
    assert!(
        took >= ALLOWED && took < ALLOWED + Duration::from_secs(4),
        "{took:?}: {said}"
    );
    let last = said.lines().last().unwrap_or_default();
    let url = store.dlock_url();
    let scheme = &url[..url.find("://").expect("a URL")];
    assert!(
        last.contains("'gone'") && last.contains(scheme),
        "the error names the key and the store: {said}"
    );
    if let Some(password) = store.password() {
        assert!(!said.contains(password), "{said}");
    }
}

/// `unlock` and `status` started while every server of the store is down keep trying to
/// reach it for the least ride-out (2 s), on the stores that connect on their first
/// request too: servers back within it are answered (the lease is released where the
/// store kept it across the restart, 77 where the restart lost it); servers back later,
/// exit 69 at the end of the ride-out.
fn down_when_unlock_and_status_start_is_ridden_out_briefly(mut store: Store) {
    let (owner, _) = store.lock_token("once", "5m");
    for server in store.servers() {
        server.kill();
    }
    let unlock = (
        Instant::now(),
        ["unlock", "once", "--owner", owner.as_str()],
    );
    let unlock = (unlock.0, saying(&store, &unlock.1, TRYING));
    let status = (Instant::now(), saying(&store, &["status", "once"], TRYING));
    for server in store.servers() {
        server.restart();
    }
    let back = Instant::now();
    let released = if store.caps().durable { 0 } else { 77 };
    // `status` answers 0 (held) or 1 (free), as the release came before it or not.
    for ((started, (mut child, lines)), answered) in [(unlock, [released; 2]), (status, [0, 1])] {
        let status = wait_exit(&mut child, Duration::from_secs(15));
        let back = back - started;
        let said = format!(
            "{:?} (back {back:?}, ended {:?} after it started)",
            rest(lines),
            started.elapsed()
        );
        let status = status.unwrap_or_else(|| panic!("it never ended: {said}"));
        // The last try of the ride-out is made at its end, 2 s after the command started.
        if back > Duration::from_millis(2200) {
            assert_eq!(status.code(), Some(69), "{said}");
        } else if back < Duration::from_millis(1800) {
            assert!(
                answered.map(Some).contains(&status.code()),
                "{status}: {said}"
            );
        }
    }
}

/// Clients waiting for a held key (`exec` and `wait`) when every server of the store is
/// killed give up by the end of the wait they were allowed (a store that may come back is
/// tried again until then), and none reports the key free or itself as the holder.
fn killed_while_waiting_is_69_at_the_end_of_the_wait(mut store: Store) {
    store.lock_token("w", "5m");
    let timeout = format!("{}ms", ALLOWED.as_millis());
    let exec = ["exec", "w", "--timeout", &timeout, "--", "true"];
    let exec = waiter(&store, &exec, "w");
    let wait = waiter(&store, &["wait", "w", "--timeout", &timeout], "w");
    let killed = Instant::now();
    for server in store.servers() {
        server.kill();
    }
    // Side by side: each is timed from the kill.
    std::thread::scope(|s| {
        let store = &store;
        s.spawn(move || gave_up(store, exec, "w", killed));
        s.spawn(move || gave_up(store, wait, "w", killed));
    });
}

/// Holds `key` with `ttl` on `store`; dlock, the command's pid and the lease's expiry on
/// the server right after a renewal it accepted, where the store says it on our clock.
fn held(
    store: &mut Store,
    key: &str,
    ttl: Duration,
    dir: &std::path::Path,
) -> (Child, u32, Option<u64>) {
    let (dlock, pid) = store.hold(key, &format!("{}ms", ttl.as_millis()), dir);
    let expires = store
        .lease_expiry_ms(key)
        .map(|_| support::just_renewed(ttl * 2, || store.lease_expiry_ms(key).expect("a lease")));
    (dlock, pid, expires)
}

/// CMD is dead before `expires_ms` (the lease's expiry on the server) or, where the store
/// does not say it, within a TTL of the fault; and dlock ends with 79. (CMD's death is
/// what must come in time: dlock may still be trying to release the lease afterwards.)
fn lost_in_time(
    dlock: &mut Child,
    pid: u32,
    ttl: Duration,
    expires_ms: Option<u64>,
    fault_ms: u64,
) {
    let dead = support::wait_for(ttl + Duration::from_secs(10), || !alive(pid));
    let dead_ms = now_ms();
    assert!(dead, "the command outlived its lease");
    let status = wait_exit(dlock, Duration::from_secs(10)).expect("dlock did not give up");
    assert_eq!(status.code(), Some(79), "{status:?}");
    let limit = expires_ms.unwrap_or(fault_ms + ttl.as_millis() as u64);
    assert!(
        dead_ms < limit,
        "the command must die before the lease can expire: {}ms late, {}ms after the fault",
        dead_ms - limit,
        dead_ms - fault_ms
    );
}

/// A holder whose servers are all killed kills its command before the lease can expire
/// there (a server that comes back with its data must not find CMD still running).
fn killed_while_holding_kills_the_command_in_time(mut store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let ttl = lease(&store, Duration::from_millis(1500));
    let (mut dlock, pid, expires) = held(&mut store, "dead", ttl, dir.path());
    let killed_ms = now_ms();
    for server in store.servers() {
        server.kill();
    }
    lost_in_time(&mut dlock, pid, ttl, expires, killed_ms);
    let err = stderr_of(dlock);
    assert!(
        err.contains("'dead'") && err.contains("lost the lease"),
        "{err}"
    );
}

/// A holder whose servers all freeze (nothing answers, connections stay open) kills its
/// command before the lease can expire there.
fn paused_past_the_ttl_while_holding_kills_the_command_in_time(mut store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let ttl = lease(&store, Duration::from_millis(1500));
    let (mut dlock, pid, expires) = held(&mut store, "paused", ttl, dir.path());
    let paused_ms = now_ms();
    for server in store.servers() {
        server.pause();
    }
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        lost_in_time(&mut dlock, pid, ttl, expires, paused_ms)
    }));
    for server in store.servers() {
        server.resume();
    }
    if let Err(panic) = caught {
        let _ = dlock.kill();
        eprintln!("dlock said: {}", stderr_of(dlock));
        std::panic::resume_unwind(panic);
    }
    let err = stderr_of(dlock);
    assert!(
        err.contains("'paused'") && err.contains("lost the lease"),
        "{err}"
    );
}

/// A holder whose servers all restart: where the store declares its leases durable
/// (`Caps::durable`), the holder reconnects and renews on past the TTL, and the key stays
/// held; elsewhere the restart loses the lease and the holder finds out (exit 79).
fn restarted_while_holding_is_what_the_store_declares(mut store: Store) {
    let dir = tempfile::tempdir().unwrap();
    // Longer than a restart of the slowest server takes on a loaded machine (a JVM for
    // ZooKeeper): a durable lease must not expire while its server is down.
    let ttl = lease(&store, Duration::from_secs(15));
    let (mut dlock, pid) = store.hold("kept", &format!("{}ms", ttl.as_millis()), dir.path());
    for server in store.servers() {
        server.restart();
    }
    let restarted_ms = now_ms();
    if !store.caps().durable {
        lost_in_time(&mut dlock, pid, ttl, None, restarted_ms);
        return;
    }
    let ended = wait_exit(&mut dlock, ttl + Duration::from_secs(1));
    assert!(
        ended.is_none() && alive(pid),
        "declared durable, yet the lease was lost across a restart ({ended:?})"
    );
    assert!(store.held("kept"), "the key stays held");
    support::send_signal(pid, "TERM");
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock ends");
    assert_eq!(status.code(), Some(143), "{}", stderr_of(dlock));
}
