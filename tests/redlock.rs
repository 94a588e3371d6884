//! Redlock over three real redis-server processes when things fail: dead, restarted and
//! paused servers. Through the CLI where users would see it, through the library where
//! timing or internal state is checked; the rest through the CLI is `redlock_cli.rs`. (The
//! cycles per second against one server are a row of `benches/suite`, `throughput`.)

use std::time::{Duration, Instant};

use crate::support::{self, no_wait, refused, req_ttl, text, RedisServer};
use dlock::backend::redis::Tuning;
use dlock::backend::redlock::{RedlockBackend, RedlockTuning};
use dlock::backend::{Backend, ReleaseMode, WaitOptions};
use dlock::error::Error;
use serde_json::Value;

pub(crate) fn three() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

pub(crate) fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

/// `DLOCK_URL` for the quorum, comma-separated as users write it.
pub(crate) fn dlock_url(servers: &[RedisServer]) -> String {
    urls(servers).join(",")
}

pub(crate) fn dlock(servers: &[RedisServer]) -> std::process::Command {
    let mut c = support::dlock();
    c.env("DLOCK_URL", dlock_url(servers));
    c
}

/// Short timeouts, so that failure tests finish quickly.
fn fast() -> RedlockTuning {
    RedlockTuning {
        server: Tuning {
            connect_timeout: Duration::from_secs(1),
            op_timeout: Duration::from_millis(300),
            heartbeat: Duration::from_millis(100),
            liveness: Duration::from_millis(400),
            exclusive: false,
        },
        jitter: Duration::from_millis(5),
        max_backoff: Duration::from_millis(200),
        stall: Duration::from_secs(3),
        reconnect_every: Duration::from_millis(100),
    }
}

async fn connect(servers: &[RedisServer]) -> RedlockBackend {
    RedlockBackend::connect_with(&urls(servers), fast())
        .await
        .expect("connect to the quorum")
}

/// The owner of `key`'s lease on one server ("" when free).
fn owner_on(server: &RedisServer, key: &str) -> String {
    server.cli(&["HGET", &format!("dlock:{{{key}}}:lease"), "owner"])
}

/// Every lease key on one server.
fn leases_on(server: &RedisServer) -> String {
    server.cli(&["KEYS", "dlock:*:lease"])
}

/// A long-lived client learns that a server restarted when its next request there fails
/// (the old connection is dead); the request after that reconnects. Tests that need the
/// restarted server to take part in the next round make that first request here.
async fn notice_restart(b: &RedlockBackend) {
    let _ = b.status(&["-".to_string()]).await;
}

#[test]
fn one_of_three_down_lock_exec_and_status_still_work() {
    let mut servers = three();
    servers[1].kill();
    assert_eq!(support::token_of(dlock(&servers).args(["exec", "job"])), 1);

    let out = dlock(&servers)
        .args(["lock", "held", "--ttl", "1m"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let owner = text(&out.stdout);
    assert_eq!(owner_on(&servers[0], "held"), owner);
    assert_eq!(owner_on(&servers[2], "held"), owner);

    // status shows each server's view and that a majority agrees.
    let out = dlock(&servers)
        .args(["status", "held", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["held"], true);
    assert_eq!(v["owner"], owner.as_str());
    let views = v["servers"].as_array().expect("per-server views");
    assert_eq!(views.len(), 3);
    assert_eq!(views[0]["owner"], owner.as_str());
    assert_eq!(views[0]["agrees"], true);
    assert!(views[1]["error"]
        .as_str()
        .unwrap()
        .contains("cannot connect"));
    assert_eq!(views[1]["agrees"], false);
    assert_eq!(views[2]["agrees"], true);
    let out = dlock(&servers).args(["status"]).output().unwrap();
    let table = text(&out.stdout);
    assert!(table.contains("quorum: yes, 2 of 3"), "{table}");
    assert!(table.contains(&servers[1].url()), "{table}");

    // A second holder is refused; the owner releases.
    let out = dlock(&servers)
        .args(["exec", "-n", "held", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let out = dlock(&servers)
        .args(["unlock", "held", "--owner", &owner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(leases_on(&servers[0]), "");
    assert_eq!(leases_on(&servers[2]), "");
}

#[test]
fn two_of_three_down_fails_naming_both_and_leaves_nothing() {
    let mut servers = three();
    servers[0].kill();
    servers[2].kill();
    // Down for the whole time allowed: at least the brief ride-out, also for `-n`.
    for args in [
        &["exec", "-n", "job", "--", "true"][..],
        &["exec", "job", "-w", "1s", "--", "true"],
        &["lock", "job", "-w", "2s"],
    ] {
        let started = Instant::now();
        let out = dlock(&servers).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(69), "{args:?}: {out:?}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(5),
            "{took:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&servers[0].url()) && err.contains(&servers[2].url()),
            "names both failing servers: {err}"
        );
        assert!(err.contains("2 needed"), "{err}");
    }
    assert_eq!(servers[1].cli(&["KEYS", "dlock:*"]), "");
}

#[tokio::test]
async fn losing_a_majority_after_connecting_takes_every_grant_back() {
    let mut servers = three();
    let b = connect(&servers).await;
    servers[0].kill();
    servers[1].kill();
    let ttl = Duration::from_secs(10);
    let e = refused(b.acquire(&req_ttl("k", "o", ttl), &no_wait()).await);
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&servers[0].url()) && msg.contains(&servers[1].url()),
        "{msg}"
    );
    // The survivor granted, then was told to take it back.
    assert_eq!(leases_on(&servers[2]), "");

    // A waiting acquisition rides a majority that is down out until its deadline.
    let t0 = Instant::now();
    let wait = WaitOptions::until(Some(Instant::now() + Duration::from_secs(3)));
    let e = refused(b.acquire(&req_ttl("k", "o", ttl), &wait).await);
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(leases_on(&servers[2]), "");
    // Renew and release cannot reach a majority either: Transient (the servers that
    // failed may come back), not NotOwner.
    let e = b.renew("k", "o", ttl).await.unwrap_err();
    assert!(matches!(e, Error::Transient(_)), "{e}");
    let e = b.release("k", "o", ReleaseMode::All).await.unwrap_err();
    assert!(matches!(e, Error::Transient(_)), "{e}");
}

#[tokio::test]
async fn a_restarted_server_cannot_hand_out_a_second_majority() {
    let mut servers = three();
    let b = connect(&servers).await;
    let ttl = Duration::from_secs(30);
    let a = b
        .acquire(&req_ttl("k", "alice", ttl), &no_wait())
        .await
        .unwrap();
    // Server 0 restarts without persistence: it forgets alice's lease.
    servers[0].restart();
    notice_restart(&b).await;
    assert_eq!(owner_on(&servers[0], "k"), "");
    // Bob gets server 0, but servers 1 and 2 still hold for alice: no majority.
    let e = refused(b.acquire(&req_ttl("k", "bob", ttl), &no_wait()).await);
    assert!(matches!(e, Error::NotObtained(_)), "{e}");
    assert!(
        e.to_string().contains("alice") && e.to_string().contains("2 of 3"),
        "{e}"
    );
    assert_eq!(
        owner_on(&servers[0], "k"),
        "",
        "bob's lone grant is taken back"
    );
    // alice still renews on a majority.
    let renewed = b.renew("k", "alice", ttl).await.unwrap();
    assert_eq!(renewed.fencing_token, a.lease.fencing_token);

    // Why the restart rule exists: had a second server also lost its data within the TTL
    // (instead of staying down for the longest TTL, or running with appendfsync always),
    // bob would get a majority while alice still holds server 2. dlock cannot detect this.
    servers[1].restart();
    notice_restart(&b).await;
    let bob = b.acquire(&req_ttl("k", "bob", ttl), &no_wait()).await;
    assert!(
        bob.is_ok(),
        "two servers that lost their data make a majority"
    );
    assert_eq!(owner_on(&servers[2], "k"), "alice");
}

#[tokio::test]
async fn tokens_keep_increasing_when_one_server_lost_its_counter() {
    let mut servers = three();
    let b = connect(&servers).await;
    let ttl = Duration::from_secs(10);
    let mut last = 0;
    for _ in 0..3 {
        let a = b
            .acquire(&req_ttl("t", "a", ttl), &no_wait())
            .await
            .unwrap();
        assert!(a.lease.fencing_token > last);
        last = a.lease.fencing_token;
        b.release("t", "a", ReleaseMode::All).await.unwrap();
    }
    servers[0].restart(); // counter gone on one server
    notice_restart(&b).await;
    assert_eq!(servers[0].cli(&["GET", "dlock:{t}:fence"]), "");
    let next = b
        .acquire(&req_ttl("t", "b", ttl), &no_wait())
        .await
        .unwrap();
    assert!(
        next.lease.fencing_token > last,
        "{} <= {last}",
        next.lease.fencing_token
    );
    // The restarted server's counter was raised to the token, and its lease stamped with it.
    let token = next.lease.fencing_token.to_string();
    for s in &servers {
        assert_eq!(s.cli(&["GET", "dlock:{t}:fence"]), token);
        assert_eq!(s.cli(&["HGET", "dlock:{t}:lease", "token"]), token);
    }
    let st = b.status(&["t".to_string()]).await.unwrap();
    let views = st[0].servers.as_ref().unwrap();
    assert!(views
        .iter()
        .all(|v| v.agrees && v.fencing_token == Some(last + 1)));
}

/// Writes a lease for `owner` on one server only, as a crashed contender leaves behind.
fn stale_lease(server: &RedisServer, key: &str, owner: &str, token: u64, ttl_ms: u64) {
    let lease = format!("dlock:{{{key}}}:lease");
    let token = token.to_string();
    server.cli(&[
        "HSET", &lease, "owner", owner, "token", &token, "depth", "1",
    ]);
    server.cli(&["PEXPIRE", &lease, &ttl_ms.to_string()]);
}

#[tokio::test]
async fn a_server_that_refused_still_gets_its_counter_raised() {
    let servers = three();
    let b = connect(&servers).await;
    for s in &servers[..2] {
        s.cli(&["SET", "dlock:{raised}:fence", "41"]);
    }
    stale_lease(&servers[2], "raised", "ghost", 7, 10_000);
    let got = b
        .acquire(&req_ttl("raised", "a", Duration::from_secs(10)), &no_wait())
        .await
        .expect("a majority is free");
    assert_eq!(got.lease.fencing_token, 42);
    // Server 2 held the key for someone else, yet its counter now covers token 42, so a
    // later majority that includes it and only one of the others still exceeds 42.
    assert_eq!(servers[2].cli(&["GET", "dlock:{raised}:fence"]), "42");
    assert_eq!(
        owner_on(&servers[2], "raised"),
        "ghost",
        "its lease is untouched"
    );
}

#[tokio::test]
async fn a_split_left_by_stale_partial_grants_clears_when_they_expire() {
    let servers = three();
    let b = connect(&servers).await;
    // No owner has a majority, and neither can we until one of these expires. Their
    // clocks start when they are written, so ours starts before that.
    let t0 = Instant::now();
    stale_lease(&servers[0], "split", "ghost-1", 1, 300);
    stale_lease(&servers[1], "split", "ghost-2", 1, 300);
    let wait = WaitOptions::until(Some(Instant::now() + Duration::from_secs(3)));
    let got = b
        .acquire(&req_ttl("split", "a", Duration::from_secs(10)), &wait)
        .await
        .expect("granted once the stale grants expire");
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(250), "{took:?}");
    assert!(took < Duration::from_millis(1_500), "{took:?}");
    // Won on a majority: the round may come between the two expiries.
    let holding = servers
        .iter()
        .filter(|s| owner_on(s, "split") == "a")
        .count();
    assert!(holding >= 2, "held on {holding} servers");
    assert!(got.lease.fencing_token >= 2, "above the stale tokens");
}

#[tokio::test]
async fn a_paused_server_costs_one_short_timeout_and_sent_at_is_the_first_send() {
    let servers = three();
    let b = connect(&servers).await;
    servers[2].pause();
    let ttl = Duration::from_secs(1); // per-server acquire timeout: 100 ms
    let before = Instant::now();
    let wall_before = dlock::backend::now_ms();
    let got = b.acquire(&req_ttl("p", "o", ttl), &no_wait()).await;
    let took = before.elapsed();
    servers[2].resume();
    let got = got.expect("a majority answers");
    assert!(
        took >= Duration::from_millis(100),
        "waited for the paused server: {took:?}"
    );
    // One short timeout, not a request timeout (seconds), and within the TTL; the margin
    // is for a loaded machine.
    assert!(took < Duration::from_millis(900), "{took:?}");
    let lease = got.lease;
    // The lease counts from the first request, not from the answers: those came at least
    // the paused server's timeout (100 ms) later.
    let sent = lease.sent_at.checked_duration_since(before);
    let sent = sent.expect("sent_at is not before the call");
    assert!(
        sent + Duration::from_millis(90) <= took,
        "sent {sent:?} of {took:?}"
    );
    assert!(
        lease.expires_at_ms <= wall_before + 1_000,
        "validity is TTL - elapsed - drift"
    );
    // The late request the paused server ran after resuming is ours and gets released.
    b.release("p", "o", ReleaseMode::All).await.unwrap();
    for s in &servers {
        assert_eq!(owner_on(s, "p"), "");
    }
}

#[tokio::test]
async fn renew_says_not_owner_only_when_a_majority_says_so() {
    let servers = three();
    let b = connect(&servers).await;
    let ttl = Duration::from_secs(10);
    b.acquire(&req_ttl("r", "o", ttl), &no_wait())
        .await
        .unwrap();
    // One server lost the lease: still renewed on a majority.
    servers[0].cli(&["DEL", "dlock:{r}:lease"]);
    b.renew("r", "o", ttl).await.expect("renewed on 2 of 3");
    // Two servers lost it: a majority definitely says "not the owner".
    servers[1].cli(&["DEL", "dlock:{r}:lease"]);
    let e = b.renew("r", "o", ttl).await.unwrap_err();
    assert!(matches!(e, Error::NotOwner(_)), "{e}");
    assert_eq!(e.exit_code(), 77);

    // Two servers not answering: Unavailable (exec retries, then kills on schedule),
    // naming both.
    b.acquire(&req_ttl("r2", "o", ttl), &no_wait())
        .await
        .unwrap();
    servers[0].pause();
    servers[1].pause();
    let t0 = Instant::now();
    let e = b.renew("r2", "o", ttl).await.unwrap_err();
    let took = t0.elapsed();
    servers[0].resume();
    servers[1].resume();
    // Silent servers may answer the next renewal: Transient, not NotOwner.
    assert!(matches!(e, Error::Transient(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&servers[0].url()) && msg.contains(&servers[1].url()),
        "{msg}"
    );
    assert!(took < Duration::from_millis(1_500), "{took:?}");
}

/// Servers that are busy (paused here) for longer than the operation timeout, but answer
/// again: a waiter keeps waiting and gets the lock. Servers that stay frozen make it fail
/// with `Unavailable` once no majority answered for the stall limit.
#[tokio::test]
async fn a_waiter_outlasts_busy_servers_and_gives_up_on_frozen_ones() {
    let servers = three();
    let b = connect(&servers).await;
    let ttl = Duration::from_secs(10);
    b.acquire(&req_ttl("busy", "a", ttl), &no_wait())
        .await
        .unwrap();
    let (wait, waiting) = support::waiting_forever();
    let second = req_ttl("busy", "b", ttl);
    let waiter = b.acquire(&second, &wait);
    let outside = async {
        waiting.await.expect("the waiter was refused first");
        servers[0].pause();
        servers[1].pause();
        // Five operation timeouts (300 ms each): long enough for a waiter that counts a
        // server not answering in time as a dead one to give up.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        servers[0].resume();
        servers[1].resume();
        b.release("busy", "a", ReleaseMode::All).await.unwrap();
    };
    let (got, ()) = tokio::join!(waiter, outside);
    let got = got.expect("busy servers are not dead ones");
    assert_eq!(got.lease.owner, "b");

    // Frozen for good: the waiter fails, about the stall limit (3 s) after a majority last
    // answered, naming the servers.
    servers[0].pause();
    servers[2].pause();
    let t0 = Instant::now();
    let e = refused(
        b.acquire(&req_ttl("frozen", "c", ttl), &WaitOptions::until(None))
            .await,
    );
    let took = t0.elapsed();
    servers[0].resume();
    servers[2].resume();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&servers[0].url()) && msg.contains(&servers[2].url()),
        "{msg}"
    );
    assert!(msg.contains("no majority answered for"), "{msg}");
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert!(took < Duration::from_secs(6), "{took:?}");
}

/// A semaphore of 2 on three servers needs all three (a majority would let three holders
/// in, each counted by two servers); readers and writers need a majority, as before.
#[tokio::test]
async fn a_semaphore_needs_every_server_of_three_and_readers_a_majority() {
    use dlock::backend::Sharing;
    let mut servers = three();
    let b = connect(&servers).await;
    let ttl = Duration::from_secs(10);
    let limited = |owner: &str| dlock::backend::AcquireRequest {
        sharing: Sharing::Limit(2),
        ..req_ttl("sem", owner, ttl)
    };
    let held = b.acquire(&limited("a"), &no_wait()).await.expect("all up");
    servers[2].kill();
    // Renewing on two of three is not enough for a semaphore holder; the third may come
    // back, so the holder renews on within its lease.
    let e = b.renew("sem", &held.lease.owner, ttl).await.unwrap_err();
    assert!(matches!(e, Error::Transient(_)), "{e}");
    assert!(e.to_string().contains("3 needed"), "{e}");
    let e = refused(b.acquire(&limited("b"), &no_wait()).await);
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(e.to_string().contains("3 needed"), "{e}");
    // The survivors gave b's places back.
    for s in &servers[..2] {
        assert_eq!(s.cli(&["HEXISTS", "dlock:{sem}:group", "b"]), "0");
    }
    let reader = dlock::backend::AcquireRequest {
        sharing: Sharing::Shared,
        ..req_ttl("rw", "r", ttl)
    };
    let r = b
        .acquire(&reader, &no_wait())
        .await
        .expect("a majority is up");
    b.renew("rw", &r.lease.owner, ttl)
        .await
        .expect("renewed on a majority");
}
