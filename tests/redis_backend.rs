//! The Redis backend against real redis-server processes (one per test, free ports): what
//! the conformance suite cannot ask of every store (the keys, TTLs and scripts on the
//! server). Its waiters are `redis_waiters.rs`, its connections `redis_connect.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{forever, no_wait, refused, req, RedisServer};
use dlock::backend::redis::{RedisBackend, Tuning};
use dlock::backend::{Acquired, Backend, ReleaseMode, WaitOptions};
use dlock::error::Error;
use tokio_util::sync::CancellationToken;

/// Short heartbeat and liveness so that dead-waiter tests finish quickly.
pub(crate) fn fast() -> Tuning {
    Tuning {
        connect_timeout: Duration::from_secs(2),
        op_timeout: Duration::from_millis(500),
        heartbeat: Duration::from_millis(100),
        liveness: Duration::from_millis(400),
        exclusive: false,
    }
}

pub(crate) async fn connect(server: &RedisServer) -> Arc<RedisBackend> {
    Arc::new(RedisBackend::connect(&server.url()).await.expect("connect"))
}

pub(crate) async fn connect_fast(server: &RedisServer) -> Arc<RedisBackend> {
    let backend = RedisBackend::connect_with(&server.url(), fast()).await;
    Arc::new(backend.expect("connect"))
}

pub(crate) async fn take(b: &RedisBackend, key: &str, owner: &str) -> Acquired {
    b.acquire(&req(key, owner), &no_wait()).await.expect("free")
}

/// Polls `cond` (which may run redis-cli) until it holds or `limit` passes.
pub(crate) async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub(crate) fn queue_len(server: &RedisServer, key: &str) -> usize {
    server
        .cli(&["ZCARD", &format!("dlock:{{{key}}}:queue")])
        .parse()
        .unwrap()
}

/// Number of waiters subscribed to their wake-up channel for `key`.
pub(crate) fn subscribed(server: &RedisServer, key: &str) -> usize {
    let out = server.cli(&["PUBSUB", "CHANNELS", &format!("dlock:{{{key}}}:*")]);
    out.lines().filter(|l| !l.is_empty()).count()
}

/// Clients blocked in `BLPOP` (fair waiters asleep) on this test's own server.
pub(crate) fn blocked(server: &RedisServer) -> usize {
    let info = server.cli(&["INFO", "clients"]);
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO clients has blocked_clients")
}

/// Waiters asleep on `key`: fair ones block in `BLPOP`, unfair ones subscribe.
pub(crate) fn sleeping(server: &RedisServer, key: &str) -> usize {
    subscribed(server, key) + blocked(server)
}

pub(crate) fn now_ms() -> u64 {
    dlock::backend::now_ms()
}

#[tokio::test]
async fn acquire_renew_release_round_trip() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let sent_before = Instant::now();
    let got = take(&b, "job", "o1").await;
    let lease = &got.lease;
    assert_eq!((lease.owner.as_str(), lease.reentered), ("o1", false));
    assert!(lease.sent_at >= sent_before && lease.sent_at <= Instant::now());
    assert!(lease.expires_at_ms.abs_diff(now_ms() + 10_000) < 1_000);
    let hash = server.cli(&["HGETALL", "dlock:{job}:lease"]);
    for field in ["owner", "token", "depth", "holder", "acquired_ms"] {
        assert!(hash.contains(field), "{field} missing from {hash}");
    }
    let holder = server.cli(&["HGET", "dlock:{job}:lease", "holder"]);
    let pid = std::process::id();
    assert!(
        holder.starts_with(&format!(r#"["testhost",{pid},"tester","test o1","#)),
        "{holder}"
    );

    let renewed = b.renew("job", "o1", Duration::from_secs(60)).await.unwrap();
    assert_eq!(renewed.fencing_token, lease.fencing_token);
    let pttl: u64 = server.cli(&["PTTL", "dlock:{job}:lease"]).parse().unwrap();
    assert!(pttl > 50_000, "renewal extended the TTL: {pttl}");

    let released = b.release("job", "o1", ReleaseMode::All).await.unwrap();
    assert_eq!(released.previous_owner.as_deref(), Some("o1"));
    assert!(!released.still_held);
    assert_eq!(server.cli(&["EXISTS", "dlock:{job}:lease"]), "0");
    let again = b.release("job", "o1", ReleaseMode::All).await.unwrap_err();
    assert!(
        matches!(&again, Error::NotOwner(m) if m.contains("gone")),
        "{again}"
    );
}

#[tokio::test]
async fn fencing_tokens_increase_and_are_never_reset() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let mut last = 0;
    for i in 0..50 {
        let owner = format!("o{i}");
        let token = take(&b, "fenced", &owner).await.lease.fencing_token;
        assert!(token > last, "token {token} after {last}");
        last = token;
        b.release("fenced", &owner, ReleaseMode::All).await.unwrap();
    }
    assert_eq!(server.cli(&["PTTL", "dlock:{fenced}:fence"]), "-1");
    assert_eq!(server.cli(&["GET", "dlock:{fenced}:fence"]), "50");
    // A new client sees the same counter: nothing lives in the client.
    let other = connect(&server).await;
    assert_eq!(take(&other, "fenced", "late").await.lease.fencing_token, 51);
}

#[tokio::test]
async fn wrong_owner_is_refused_and_nothing_changes() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "mine", "alice").await;
    let fields = |server: &RedisServer| {
        let all = server.cli(&["HGETALL", "dlock:{mine}:lease"]);
        let mut pairs: Vec<Vec<String>> = all
            .lines()
            .collect::<Vec<_>>()
            .chunks(2)
            .map(|p| p.iter().map(|s| s.to_string()).collect())
            .collect();
        pairs.sort();
        pairs
    };
    let before = fields(&server);
    let pttl_before: u64 = server.cli(&["PTTL", "dlock:{mine}:lease"]).parse().unwrap();

    let e = b.renew("mine", "mallory", Duration::from_secs(600)).await;
    let e = e.unwrap_err();
    assert_eq!(e.exit_code(), 77);
    let msg = e.to_string();
    assert!(
        msg.contains("'mine'") && msg.contains(&server.url()),
        "{msg}"
    );
    assert!(msg.contains("another owner"), "{msg}");
    for mode in [ReleaseMode::One, ReleaseMode::All] {
        let e = b.release("mine", "mallory", mode).await.unwrap_err();
        assert!(matches!(e, Error::NotOwner(_)), "{e}");
    }
    assert_eq!(fields(&server), before);
    let pttl_after: u64 = server.cli(&["PTTL", "dlock:{mine}:lease"]).parse().unwrap();
    assert!(
        pttl_after <= pttl_before,
        "renewal by a stranger extended the lease"
    );
}

#[tokio::test]
async fn reentry_counts_depth_and_keeps_the_token() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let outer = take(&b, "nest", "parent").await.lease;
    let mut inner_req = req("nest", "child");
    inner_req.reenter = vec!["parent".into()];
    inner_req.ttl = Duration::from_secs(60);
    let inner = b.acquire(&inner_req, &no_wait()).await.unwrap().lease;
    assert!(inner.reentered);
    assert_eq!(inner.owner, "parent");
    assert_eq!(inner.fencing_token, outer.fencing_token);
    let pttl: u64 = server.cli(&["PTTL", "dlock:{nest}:lease"]).parse().unwrap();
    assert!(pttl > 50_000, "re-entry extends to the longer TTL: {pttl}");
    b.acquire(&inner_req, &no_wait()).await.unwrap();
    let status = b.status(&["nest".into()]).await.unwrap();
    assert_eq!(status[0].lock.as_ref().unwrap().depth, 3);

    let one = b.release("nest", "parent", ReleaseMode::One).await.unwrap();
    assert!(one.still_held);
    assert_eq!(server.cli(&["HGET", "dlock:{nest}:lease", "depth"]), "2");
    let all = b.release("nest", "parent", ReleaseMode::All).await.unwrap();
    assert!(!all.still_held);
    assert_eq!(server.cli(&["EXISTS", "dlock:{nest}:lease"]), "0");

    take(&b, "nest", "p2").await;
    refused(b.acquire(&inner_req, &no_wait()).await); // "parent" no longer holds it
    let mut again = req("nest", "c2");
    again.reenter = vec!["p2".into()];
    b.acquire(&again, &no_wait()).await.unwrap();
    assert!(
        b.release("nest", "p2", ReleaseMode::One)
            .await
            .unwrap()
            .still_held
    );
    assert!(
        !b.release("nest", "p2", ReleaseMode::One)
            .await
            .unwrap()
            .still_held
    );
}

#[tokio::test]
async fn no_wait_on_a_held_key_fails_at_once() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "busy", "alice").await;
    let t0 = Instant::now();
    let e = refused(b.acquire(&req("busy", "bob"), &no_wait()).await);
    let elapsed = t0.elapsed();
    assert_eq!(e.exit_code(), 75);
    let msg = e.to_string();
    assert!(msg.contains("lock 'busy' is held by alice"), "{msg}");
    let holder = format!("testhost pid {}: test alice", std::process::id());
    assert!(msg.contains(&holder), "{msg}");
    assert!(msg.contains(&server.url()) && !msg.contains('\n'), "{msg}");
    assert!(elapsed < Duration::from_millis(200), "{elapsed:?}");
    assert_eq!(queue_len(&server, "busy"), 0, "--no-wait must not queue");
    assert_eq!(sleeping(&server, "busy"), 0, "--no-wait must not sleep");
}

#[tokio::test]
async fn timeout_elapses_within_margins_and_leaves_the_queue() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "slow", "alice").await;
    let t0 = Instant::now();
    let wait = WaitOptions::until(Some(t0 + Duration::from_millis(300)));
    let e = refused(b.acquire(&req("slow", "bob"), &wait).await);
    let elapsed = t0.elapsed();
    assert!(
        matches!(&e, Error::NotObtained(m) if m.contains("gave up after")),
        "{e}"
    );
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(800), "{elapsed:?}");
    assert_eq!(queue_len(&server, "slow"), 0);
    assert_eq!(server.cli(&["HLEN", "dlock:{slow}:info"]), "0");
}

#[tokio::test]
async fn cancelling_a_wait_leaves_nothing_queued_or_held() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "sig", "alice").await;
    let mut wait = forever();
    let cancel = CancellationToken::new();
    wait.cancel = cancel.clone();
    let task = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&req("sig", "bob"), &wait).await })
    };
    assert!(eventually(Duration::from_secs(2), || sleeping(&server, "sig") == 1).await);
    assert_eq!(queue_len(&server, "sig"), 1);
    let t0 = Instant::now();
    cancel.cancel();
    let e = refused(task.await.unwrap());
    assert!(
        t0.elapsed() < Duration::from_millis(200),
        "{:?}",
        t0.elapsed()
    );
    assert!(
        matches!(&e, Error::Cancelled(m, 0) if m.contains("'sig'")),
        "{e}"
    );
    assert_eq!(queue_len(&server, "sig"), 0);
    assert_eq!(server.cli(&["ZCARD", "dlock:{sig}:alive"]), "0");
    assert_eq!(server.cli(&["HLEN", "dlock:{sig}:info"]), "0");
    assert_eq!(server.cli(&["HGET", "dlock:{sig}:lease", "owner"]), "alice");
    // A token cancelled before the call: no attempt at all.
    b.release("sig", "alice", ReleaseMode::All).await.unwrap();
    let wait = forever();
    wait.cancel.cancel();
    let e = refused(b.acquire(&req("sig", "bob"), &wait).await);
    assert!(matches!(e, Error::Cancelled(_, 0)), "{e}");
    assert_eq!(server.cli(&["EXISTS", "dlock:{sig}:lease"]), "0");
}

#[tokio::test]
async fn listing_a_hundred_thousand_locks_reads_them_all() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let make = "for i = 1, 100000 do \
        local k = 'dlock:{k' .. string.format('%06d', i) .. '}:lease' \
        redis.call('HSET', k, 'owner', 'o' .. i, 'token', i, 'depth', 1, 'holder', \
          '[\"h\",' .. i .. ',\"u\",\"c\",1]', \
          'acquired_ms', 1) \
        redis.call('PEXPIRE', k, 600000) \
        redis.call('INCR', 'dlock:{k' .. string.format('%06d', i) .. '}:fence') end";
    server.cli(&["EVAL", make, "0"]);
    // How fast is the bench's business (its `status` section); here, that all are read.
    let all = b.status(&[]).await.unwrap();
    assert_eq!(all.len(), 100_000);
    assert_eq!(all[0].key, "k000001");
    assert_eq!(all[99_999].lock.as_ref().unwrap().fencing_token, 100_000);
    assert_eq!(
        all[41].lock.as_ref().unwrap().holder.pid,
        42,
        "holder JSON read"
    );
}

/// A grant whose reply a waiter never read (it gave up while the attempt was on its way)
/// is found by the next attempt of the same request, by owner id: claimed, with its TTL
/// restarted and its token kept, not waited for as if someone else held it.
#[tokio::test]
async fn an_attempt_claims_its_own_unread_grant() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let first = take(&b, "unread", "o1").await.lease;
    server.cli(&["PEXPIRE", "dlock:{unread}:lease", "2000"]);
    let again = take(&b, "unread", "o1").await.lease;
    assert_eq!(again.fencing_token, first.fencing_token);
    assert!(!again.reentered);
    let pttl: u64 = server
        .cli(&["PTTL", "dlock:{unread}:lease"])
        .parse()
        .unwrap();
    assert!(pttl > 9_000, "TTL restarted: {pttl}");
    assert_eq!(server.cli(&["HGET", "dlock:{unread}:lease", "depth"]), "1");
    // Anyone else is still refused.
    refused(b.acquire(&req("unread", "o2"), &no_wait()).await);
}

/// A script's text as the backend sends it: the shared helpers, then the script.
fn script_text(name: &str) -> String {
    let lua = |name: &str| std::fs::read_to_string(format!("src/backend/redis/{name}")).unwrap();
    format!("{}\n{}", lua("common.lua"), lua(name))
}

/// The leave script, run as the backend runs it (helpers prepended), on hand-made state:
/// a waiter leaving while a grant to it was on its way releases that lease and wakes the
/// next live waiter.
#[test]
fn leaving_releases_an_unread_grant_and_wakes_the_next() {
    let server = RedisServer::start();
    let script = script_text("leave.lua");
    let k = |s: &str| format!("dlock:{{gone}}:{s}");
    server.cli(&[
        "HSET",
        &k("lease"),
        "owner",
        "me",
        "token",
        "7",
        "depth",
        "1",
    ]);
    server.cli(&["ZADD", &k("queue"), "1", "next"]);
    server.cli(&["ZADD", &k("alive"), "99999999999999", "next"]);
    let (queue, alive, info, lease) = (k("queue"), k("alive"), k("info"), k("lease"));
    let (group, ends) = (k("group"), k("ends"));
    let wake = k("wake:");
    let args = [
        "EVAL", &script, "6", &queue, &alive, &info, &lease, &group, &ends, "w-me", &wake, "me",
    ];
    assert_eq!(server.cli(&args), "0", "it had left the queue already");
    assert_eq!(server.cli(&["EXISTS", &lease]), "0");
    assert_eq!(
        server.cli(&["LLEN", &k("wake:next")]),
        "1",
        "the next one is woken"
    );
    // Someone else's lease is left alone.
    server.cli(&["HSET", &lease, "owner", "other"]);
    server.cli(&args);
    assert_eq!(server.cli(&["HGET", &lease, "owner"]), "other");
}

/// The acquire attempt pipelined behind a waiter's `BLPOP` may run after that waiter gave
/// up and left (its connection not yet seen closed): then it must neither take a free lock
/// nor queue the waiter again.
#[test]
fn a_pipelined_attempt_of_a_waiter_that_left_does_nothing() {
    let server = RedisServer::start();
    let script = script_text("acquire.lua");
    let k = |s: &str| format!("dlock:{{left}}:{s}");
    let keys = [
        k("lease"),
        k("fence"),
        k("queue"),
        k("alive"),
        k("info"),
        k("unfair"),
        k("group"),
    ];
    let attempt = |enqueue: &str| {
        let mut args = vec!["EVAL", &script, "7"];
        args.extend(keys.iter().map(String::as_str));
        let wake = k("wake:");
        let argv = [
            "ghost",
            "10000",
            "w1",
            "1",
            enqueue,
            "4000",
            &wake,
            r#"["h",1,"u","c",0]"#,
            "0",
            "1",
        ];
        args.extend(argv);
        server.cli(&args)
    };
    assert_eq!(attempt("2"), "2");
    assert_eq!(
        server.cli(&["KEYS", "dlock:{left}:*"]),
        "",
        "nothing written"
    );
    // The same attempt from a waiter that is queued takes the free lock.
    server.cli(&["ZADD", &k("queue"), "1", "w1"]);
    server.cli(&["ZADD", &k("alive"), "99999999999999", "w1"]);
    assert!(attempt("2").starts_with("1\nghost\n1"), "granted");
    assert_eq!(server.cli(&["ZCARD", &k("queue")]), "0");
}
