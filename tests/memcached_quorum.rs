//! Several memcached servers as one majority quorum (Redlock's rules). The CLI matrix and
//! the conformance suite run on three servers (`memcached_quorum` in `macros.rs`); here,
//! the faults a quorum is for: one server killed, two killed, one restarted empty (its
//! fencing counter lost or put back lower), one frozen.

use std::time::{Duration, Instant};

use crate::support::{self, MemcachedServer, Store};

fn servers(store: &mut Store) -> &mut Vec<MemcachedServer> {
    match store {
        Store::MemcachedQuorum(servers) => servers,
        _ => panic!("not a memcached quorum"),
    }
}

/// `dlock exec KEY` printing its fencing token: the token, or the exit code and stderr.
fn exec_token(store: &Store, key: &str) -> Result<u64, (Option<i32>, String)> {
    support::try_token_of(store.dlock().args(["exec", "--ttl", "5s", key]))
}

/// What one server holds for lock `key`: the item's value, if any.
fn item(server: &MemcachedServer, key: &str) -> Option<String> {
    let reply = server.ask(&format!("mg dlock:lock:{key} v"), |l| {
        l == "EN" || l.starts_with("HD") || l.starts_with("VA") || l == "END"
    });
    if reply[0] == "EN" {
        return None;
    }
    Some(server.ask(&format!("mg dlock:lock:{key} v"), |l| l.starts_with('{'))[1].clone())
}

/// A server's fencing counter for `key`.
fn counter(server: &MemcachedServer, key: &str) -> Option<u64> {
    let reply = server.ask(&format!("mg dlock:token:{key} v"), |l| {
        l == "EN" || !l.starts_with("VA")
    });
    reply.last()?.parse().ok()
}

#[test]
fn one_of_three_killed_still_locks_execs_and_reports() {
    let mut store = Store::memcached_quorum();
    let first = exec_token(&store, "job").expect("exec");
    servers(&mut store)[2].kill();
    let second = exec_token(&store, "job").expect("exec with one server down");
    assert!(second > first, "{second} after {first}");
    let out = store
        .dlock()
        .args(["lock", "--ttl", "10s", "held"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let owner = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = store.dlock().args(["status", "held"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let dead = servers(&mut store)[2].url();
    assert!(text.contains(&owner) && text.contains(&dead), "{text}");
    assert!(text.contains("2 of 3 servers agree"), "{text}");
    let out = store
        .dlock()
        .args(["unlock", "--owner", &owner, "held"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!store.held("held"));
}

#[test]
fn two_of_three_killed_is_exit_69_in_one_line_and_nothing_stays_held() {
    let mut store = Store::memcached_quorum();
    servers(&mut store)[0].kill();
    servers(&mut store)[1].kill();
    // Within the least ride-out (a store short of a majority is tried for the time
    // allowed, 30 s without one).
    for args in [
        &["exec", "job", "-w", "1s", "--", "true"][..],
        &["lock", "job", "-n"],
        &["exec", "-n", "job", "--", "true"],
    ] {
        let out = store.dlock().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(69), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        let s = servers(&mut store);
        assert!(err.contains("'job'") && err.contains(&s[0].url()), "{err}");
        assert!(err.contains("1 of 3 servers answered, 2 needed"), "{err}");
        assert_eq!(
            item(&s[2], "job"),
            None,
            "the survivor's grant was given back"
        );
    }
    let out = store.dlock().args(["status", "job"]).output().unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
}

/// A member restarted empty loses its counter; one put back lower (a host whose clock is
/// behind recreated it) is raised: tokens keep increasing either way.
#[test]
fn a_restarted_member_does_not_make_tokens_go_back() {
    let mut store = Store::memcached_quorum();
    let mut last = exec_token(&store, "job").expect("exec");
    for i in 0..3 {
        servers(&mut store)[i].restart();
        let token = exec_token(&store, "job").expect("exec after a restart");
        assert!(token > last, "member {i} restarted: {token} after {last}");
        last = token;
        // Put the restarted member's counter back far below the others'.
        let s = &servers(&mut store)[i];
        let reply = s.ask("ms dlock:token:job 1\r\n7", |l| l == "HD" || l == "NS");
        assert_eq!(reply, ["HD"]);
        let token = exec_token(&store, "job").expect("exec with a counter behind");
        assert!(token > last, "member {i} behind: {token} after {last}");
        last = token;
        let raised = counter(&servers(&mut store)[i], "job").unwrap_or(0);
        assert!(
            raised >= last,
            "member {i} raised to {raised}, token {last}"
        );
    }
}

/// A frozen member (SIGSTOP) costs one short timeout, not one per request.
#[test]
fn a_frozen_member_costs_one_short_timeout() {
    let mut store = Store::memcached_quorum();
    exec_token(&store, "warm").expect("exec");
    let pid = servers(&mut store)[1].pid().expect("running");
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let t0 = Instant::now();
    let token = exec_token(&store, "job");
    let took = t0.elapsed();
    let t1 = Instant::now();
    let out = store.dlock().args(["status", "job"]).output().unwrap();
    let status_took = t1.elapsed();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(token.is_ok(), "{token:?}");
    assert!(took < Duration::from_millis(1500), "exec took {took:?}");
    assert_eq!(out.status.code(), Some(1), "free: {out:?}");
    assert!(
        status_took < Duration::from_millis(2500),
        "status took {status_took:?}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("not answering"), "{text}");
}

#[test]
fn urls_that_make_no_quorum_are_exit_2() {
    let server = MemcachedServer::start();
    let url = server.url();
    for given in [
        format!("{url},redis://127.0.0.1:1"),
        format!("{url},{url}"),
        format!("{url},{url}/"),
    ] {
        let out = support::dlock()
            .env("DLOCK_URL", &given)
            .args(["exec", "job", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{given}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert_eq!(item(&server, "job"), None);
}

/// `--hold-at-least` and the last-run record on the quorum, with one server down.
#[test]
fn hold_at_least_and_the_last_run_with_one_server_down() {
    let mut store = Store::memcached_quorum();
    servers(&mut store)[0].kill();
    let out = store
        .dlock()
        .args(["exec", "--hold-at-least", "4s", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = store
        .dlock()
        .args(["status", "job", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "held on: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["last_run"]["exit_code"], 0, "{v}");
    let out = store
        .dlock()
        .args(["exec", "-n", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "still held: {out:?}");
}

/// A semaphore of 2 on three servers needs all three (on a majority, three holders could
/// each hold two of three servers); readers need a majority. A `lock`ed semaphore holder's
/// renewal, by another process, is held to the same count.
#[test]
fn a_semaphore_needs_every_server_of_three_and_readers_a_majority() {
    let mut store = Store::memcached_quorum();
    let out = store
        .dlock()
        .args(["lock", "--ttl", "10s", "--limit", "2", "sem"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let owner = String::from_utf8_lossy(&out.stdout).trim().to_string();
    servers(&mut store)[2].kill();
    let run = |args: &[&str]| {
        let out = store.dlock().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["exec", "-n", "--limit", "2", "sem", "--", "true"]);
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains("3 needed") && err.contains("'sem'"), "{err}");
    let (code, err) = run(&["renew", "sem", "--owner", &owner, "--ttl", "10s"]);
    assert_eq!(code, Some(69), "renewed on two of three: {err}");
    assert!(err.contains("3 needed"), "{err}");
    let (code, err) = run(&["exec", "-n", "-s", "rw", "--", "true"]);
    assert_eq!(code, Some(0), "a reader on a majority: {err}");
}
