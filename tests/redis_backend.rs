//! The Redis backend against real redis-server processes (one per test, free ports).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{self, forever, no_wait, refused, req, self_signed, RedisServer};
use dlock::backend::redis::{connection_info, RedisBackend, Tuning};
use dlock::backend::{AcquireRequest, Acquired, Backend, ReleaseMode, WaitInfo, WaitOptions};
use dlock::error::Error;
use tokio_util::sync::CancellationToken;

/// Short heartbeat and liveness so that dead-waiter tests finish quickly.
fn fast() -> Tuning {
    Tuning {
        connect_timeout: Duration::from_secs(2),
        op_timeout: Duration::from_millis(500),
        heartbeat: Duration::from_millis(100),
        liveness: Duration::from_millis(400),
        exclusive: false,
    }
}

async fn connect(server: &RedisServer) -> Arc<RedisBackend> {
    Arc::new(RedisBackend::connect(&server.url()).await.expect("connect"))
}

async fn connect_fast(server: &RedisServer) -> Arc<RedisBackend> {
    let backend = RedisBackend::connect_with(&server.url(), fast()).await;
    Arc::new(backend.expect("connect"))
}

async fn take(b: &RedisBackend, key: &str, owner: &str) -> Acquired {
    b.acquire(&req(key, owner), &no_wait()).await.expect("free")
}

/// Polls `cond` (which may run redis-cli) until it holds or `limit` passes.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
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

fn queue_len(server: &RedisServer, key: &str) -> usize {
    server
        .cli(&["ZCARD", &format!("dlock:{{{key}}}:queue")])
        .parse()
        .unwrap()
}

/// Number of waiters subscribed to their wake-up channel for `key`.
fn subscribed(server: &RedisServer, key: &str) -> usize {
    let out = server.cli(&["PUBSUB", "CHANNELS", &format!("dlock:{{{key}}}:*")]);
    out.lines().filter(|l| !l.is_empty()).count()
}

/// Clients blocked in `BLPOP` (fair waiters asleep) on this test's own server.
fn blocked(server: &RedisServer) -> usize {
    let info = server.cli(&["INFO", "clients"]);
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO clients has blocked_clients")
}

/// Waiters asleep on `key`: fair ones block in `BLPOP`, unfair ones subscribe.
fn sleeping(server: &RedisServer, key: &str) -> usize {
    subscribed(server, key) + blocked(server)
}

fn now_ms() -> u64 {
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
async fn lease_expires_after_its_ttl() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let mut short = req("brief", "o1");
    short.ttl = Duration::from_millis(200);
    let t0 = Instant::now();
    b.acquire(&short, &no_wait()).await.unwrap();
    let freed = eventually(Duration::from_secs(2), || {
        server.cli(&["EXISTS", "dlock:{brief}:lease"]) == "0"
    })
    .await;
    let elapsed = t0.elapsed();
    assert!(freed, "the lease never expired");
    assert!(
        elapsed >= Duration::from_millis(180),
        "expired early: {elapsed:?}"
    );
    let e = b
        .renew("brief", "o1", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::NotOwner(m) if m.contains("gone")),
        "{e}"
    );
    assert_eq!(take(&b, "brief", "o2").await.lease.owner, "o2");
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
async fn force_release_takes_it_from_whoever_holds_it() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "stuck", "gone-away").await;
    let r = b
        .release("stuck", "admin", ReleaseMode::Force)
        .await
        .unwrap();
    assert_eq!(r.previous_owner.as_deref(), Some("gone-away"));
    assert!(!r.still_held);
    let r = b
        .release("stuck", "admin", ReleaseMode::Force)
        .await
        .unwrap();
    assert_eq!(r.previous_owner, None);
    take(&b, "stuck", "next").await;
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

/// The CLI's tuning: one connection, on which a fair waiter blocks; a heartbeat longer
/// than the request timeout, so a request queued behind a forgotten `BLPOP` would fail.
fn exclusive() -> Tuning {
    Tuning {
        heartbeat: Duration::from_secs(5),
        exclusive: true,
        ..Tuning::default()
    }
}

#[tokio::test]
async fn an_exclusive_backend_answers_at_once_after_a_cancelled_blpop() {
    let server = RedisServer::start();
    let b = RedisBackend::connect_with(&server.url(), exclusive()).await;
    let b = Arc::new(b.expect("connect"));
    take(&b, "one", "alice").await;
    let mut wait = forever();
    let cancel = CancellationToken::new();
    wait.cancel = cancel.clone();
    let task = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&req("one", "bob"), &wait).await })
    };
    assert!(eventually(Duration::from_secs(2), || blocked(&server) == 1).await);
    cancel.cancel();
    let e = refused(task.await.unwrap());
    assert!(matches!(e, Error::Cancelled(..)), "{e}");
    // The shared connection the BLPOP blocked is not used again.
    let t0 = Instant::now();
    let st = b.status(&["one".to_string()]).await.expect("status");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(st[0].lock.as_ref().map(|l| l.owner.as_str()), Some("alice"));
    assert_eq!(st[0].waiters.as_ref().map(Vec::len), Some(0));
    assert_eq!(queue_len(&server, "one"), 0);
}

/// Starts a waiter for `key` that reports when it got the lock.
fn spawn_waiter(
    b: &Arc<RedisBackend>,
    request: AcquireRequest,
) -> tokio::task::JoinHandle<(dlock::error::Result<Acquired>, Instant)> {
    let b = b.clone();
    tokio::spawn(async move {
        let got = b.acquire(&request, &forever()).await;
        (got, Instant::now())
    })
}

#[tokio::test]
async fn a_waiter_picks_up_a_release_within_milliseconds() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let other = connect(&server).await;
    let mut worst = Duration::ZERO;
    for round in 0..5 {
        let holder = format!("h{round}");
        take(&b, "relay", &holder).await;
        let waiter = spawn_waiter(&other, req("relay", &format!("w{round}")));
        assert!(eventually(Duration::from_secs(2), || sleeping(&server, "relay") == 1).await);
        let t0 = Instant::now();
        b.release("relay", &holder, ReleaseMode::All).await.unwrap();
        let (got, at) = waiter.await.unwrap();
        let lease = got.unwrap().lease;
        worst = worst.max(at - t0);
        b.release("relay", &lease.owner, ReleaseMode::All)
            .await
            .unwrap();
    }
    println!("hand-off latency (worst of 5): {worst:?}");
    assert!(worst < Duration::from_millis(50), "hand-off took {worst:?}");
}

#[tokio::test]
async fn waiters_are_served_in_arrival_order() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "line", "first").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (b, tx) = (b.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let got = b.acquire(&req("line", &format!("w{i}")), &forever()).await;
            tx.send((i, got.unwrap().lease.owner)).unwrap();
        }));
        // Each waiter is queued before the next one starts: a known arrival order.
        assert!(
            eventually(Duration::from_secs(2), || queue_len(&server, "line")
                == i + 1)
            .await
        );
    }
    let status = b.status(&["line".into()]).await.unwrap();
    let queued: Vec<u32> = status[0]
        .waiters
        .as_ref()
        .unwrap()
        .iter()
        .map(|w| w.holder.pid)
        .collect();
    assert_eq!(queued, vec![std::process::id(); 12]);
    b.release("line", "first", ReleaseMode::All).await.unwrap();
    let mut order = Vec::new();
    for _ in 0..12 {
        let (i, owner) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("the next waiter got the lock")
            .unwrap();
        order.push(i);
        b.release("line", &owner, ReleaseMode::All).await.unwrap();
    }
    assert_eq!(order, (0..12).collect::<Vec<_>>());
    assert_eq!(queue_len(&server, "line"), 0);
}

#[tokio::test]
async fn a_dropped_waiter_leaves_the_queue() {
    let server = RedisServer::start();
    let b = connect(&server).await; // default liveness: only the drop can explain a fast exit
    take(&b, "drop", "alice").await;
    let first = spawn_waiter(&b, req("drop", "w1"));
    assert!(eventually(Duration::from_secs(2), || queue_len(&server, "drop") == 1).await);
    let second = spawn_waiter(&b, req("drop", "w2"));
    assert!(eventually(Duration::from_secs(2), || queue_len(&server, "drop") == 2).await);
    first.abort();
    assert!(first.await.err().unwrap().is_cancelled());
    assert!(eventually(Duration::from_secs(1), || queue_len(&server, "drop") == 1).await);
    let t0 = Instant::now();
    b.release("drop", "alice", ReleaseMode::All).await.unwrap();
    let (got, at) = tokio::time::timeout(Duration::from_secs(1), second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.unwrap().lease.owner, "w2");
    assert!(at - t0 < Duration::from_millis(100), "{:?}", at - t0);
}

#[tokio::test]
async fn a_dead_waiter_does_not_stall_the_queue() {
    let server = RedisServer::start();
    let b = connect_fast(&server).await;
    take(&b, "ghost", "alice").await;
    // A waiter that was killed: first in line, last heard of now, never again.
    let injected = Instant::now();
    let dead_at = now_ms() + 300;
    server.cli(&["ZADD", "dlock:{ghost}:queue", "0", "dead"]);
    server.cli(&["ZADD", "dlock:{ghost}:alive", &dead_at.to_string(), "dead"]);
    server.cli(&["HSET", "dlock:{ghost}:info", "dead", "{}"]);
    // The release woke it while it was dead: its wake list goes when it is dropped.
    server.cli(&["RPUSH", "dlock:{ghost}:wake:dead", "1"]);
    let live = spawn_waiter(&b, req("ghost", "live"));
    assert!(eventually(Duration::from_secs(2), || queue_len(&server, "ghost") == 2).await);
    b.release("ghost", "alice", ReleaseMode::All).await.unwrap();
    let (got, at) = tokio::time::timeout(Duration::from_secs(3), live)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.unwrap().lease.owner, "live");
    let waited = at - injected;
    assert!(
        waited >= Duration::from_millis(290),
        "the dead head was skipped while alive: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(700),
        "the dead head stalled the queue: {waited:?}"
    );
    assert_eq!(queue_len(&server, "ghost"), 0);
    assert_eq!(server.cli(&["EXISTS", "dlock:{ghost}:wake:dead"]), "0");
}

#[tokio::test]
async fn no_wait_does_not_jump_a_live_queue_but_unfair_may() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let alive_until = (now_ms() + 60_000).to_string();
    server.cli(&["ZADD", "dlock:{fifo}:queue", "1", "early"]);
    server.cli(&["ZADD", "dlock:{fifo}:alive", &alive_until, "early"]);
    let e = refused(b.acquire(&req("fifo", "late"), &no_wait()).await);
    assert!(
        matches!(&e, Error::NotObtained(m) if m.contains("promised to")),
        "{e}"
    );
    assert_eq!(queue_len(&server, "fifo"), 1);
    let mut unfair = req("fifo", "rude");
    unfair.fair = false;
    assert_eq!(
        b.acquire(&unfair, &no_wait()).await.unwrap().lease.owner,
        "rude"
    );
}

#[tokio::test]
async fn unfair_waiters_are_woken_by_a_release() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "free-for-all", "alice").await;
    let mut unfair = req("free-for-all", "bob");
    unfair.fair = false;
    let waiter = spawn_waiter(&b, unfair);
    assert!(
        eventually(Duration::from_secs(2), || subscribed(
            &server,
            "free-for-all"
        ) == 1)
        .await
    );
    assert_eq!(queue_len(&server, "free-for-all"), 0);
    let t0 = Instant::now();
    b.release("free-for-all", "alice", ReleaseMode::All)
        .await
        .unwrap();
    let (got, at) = waiter.await.unwrap();
    assert_eq!(got.unwrap().lease.owner, "bob");
    assert!(at - t0 < Duration::from_millis(50), "{:?}", at - t0);
}

#[tokio::test]
async fn a_waiter_notices_an_expired_lease_without_a_message() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let mut short = req("lapse", "crashed");
    short.ttl = Duration::from_millis(300);
    let t0 = Instant::now();
    b.acquire(&short, &no_wait()).await.unwrap();
    let (got, at) = spawn_waiter(&b, req("lapse", "next")).await.unwrap();
    assert_eq!(got.unwrap().lease.owner, "next");
    let waited = at - t0;
    assert!(waited >= Duration::from_millis(290), "{waited:?}");
    assert!(
        waited < Duration::from_millis(500),
        "woke at the expiry, not a poll: {waited:?}"
    );
}

#[tokio::test]
async fn progress_reports_the_holder_and_position() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "seen", "alice").await;
    let seen: Arc<Mutex<Vec<WaitInfo>>> = Arc::default();
    let mut wait = WaitOptions::until(Some(Instant::now() + Duration::from_millis(200)));
    let sink = seen.clone();
    wait.progress = Some(Arc::new(move |info: &WaitInfo| {
        sink.lock().unwrap().push(info.clone())
    }));
    refused(b.acquire(&req("seen", "bob"), &wait).await);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "reported once, not on every poll: {seen:?}");
    assert_eq!(seen[0].holder.as_ref().unwrap().owner, "alice");
    assert_eq!((seen[0].position, seen[0].waiters), (Some(1), Some(1)));
}

#[tokio::test]
async fn status_of_named_keys_and_of_all_keys() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "b-key", "ob").await;
    take(&b, "a-key", "oa").await;
    take(&b, "c-key", "oc").await;
    b.release("c-key", "oc", ReleaseMode::All).await.unwrap();
    let mut waiting = req("a-key", "w");
    waiting.holder.pid = 777;
    let waiter = spawn_waiter(&b, waiting);
    assert!(eventually(Duration::from_secs(2), || queue_len(&server, "a-key") == 1).await);

    let named = b.status(&["c-key".into(), "a-key".into()]).await.unwrap();
    assert_eq!(named.len(), 2);
    assert_eq!(named[0].key, "c-key");
    assert!(named[0].lock.is_none());
    let a = named[1].lock.as_ref().unwrap();
    let pid = std::process::id();
    assert_eq!((a.owner.as_str(), a.depth, a.holder.pid), ("oa", 1, pid));
    assert_eq!(a.holder.command, "test oa");
    assert!(a.ttl_left_ms.unwrap() > 9_000);
    let waiters = named[1].waiters.as_ref().unwrap();
    assert_eq!(waiters.len(), 1);
    assert_eq!(waiters[0].holder.pid, 777);

    let all = b.status(&[]).await.unwrap();
    let keys: Vec<&str> = all.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["a-key", "b-key"]);
    assert_eq!(all[0].waiters.as_ref().unwrap().len(), 1);
    assert_eq!(all[1].waiters.as_ref().unwrap().len(), 0);
    waiter.abort();
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

#[tokio::test]
async fn refused_connection_is_unavailable_in_one_line() {
    let port = support::free_port();
    let url = format!("redis://:topsecret@127.0.0.1:{port}");
    let t0 = Instant::now();
    let e = RedisBackend::connect(&url)
        .await
        .err()
        .expect("nobody listens");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert_eq!(e.exit_code(), 69);
    let msg = e.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert!(!msg.contains("topsecret") && !msg.contains('\n'), "{msg}");
}

#[tokio::test]
async fn wrong_or_missing_password_is_unavailable() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let bad = format!("redis://:hunter2pw@127.0.0.1:{}", server.port);
    let e = RedisBackend::connect(&bad)
        .await
        .err()
        .expect("wrong password");
    let msg = e.to_string();
    assert_eq!(e.exit_code(), 69, "{msg}");
    assert!(!msg.contains("hunter2pw") && !msg.contains('\n'), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{}", server.port)), "{msg}");

    // Without a password the handshake sends nothing, so the refusal comes with the first
    // request (NOAUTH) rather than at connect: either way, exit 69.
    let e = match RedisBackend::connect(&server.url()).await {
        Err(e) => e,
        Ok(b) => b
            .acquire(&req("auth", "o"), &no_wait())
            .await
            .expect_err("no password"),
    };
    assert_eq!(e.exit_code(), 69, "{e}");
    assert!(!e.to_string().contains('\n'), "{e}");

    let good = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let b = RedisBackend::connect(&good).await.unwrap();
    assert!(!b.describe().contains("s3cret"));
    b.acquire(&req("auth", "o"), &no_wait()).await.unwrap();
}

#[test]
fn rediscli_auth_fills_in_a_missing_password() {
    let info = connection_info("redis://127.0.0.1:6390/2", Some("fromenv".into())).unwrap();
    assert_eq!(info.redis_settings().password(), Some("fromenv"));
    assert_eq!(info.redis_settings().db(), 2);
    let info = connection_info("redis://u:inurl@h:1", Some("fromenv".into())).unwrap();
    assert_eq!(info.redis_settings().password(), Some("inurl"));
    assert_eq!(info.redis_settings().username(), Some("u"));
    let info = connection_info("redis://h", None).unwrap();
    assert_eq!(info.redis_settings().password(), None);
    let e = connection_info("redis://:pw@h:notaport", None).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(!e.to_string().contains(":pw@"), "{e}");
}

#[tokio::test]
async fn env_password_authenticates() {
    // Through the URL builder, not the process environment (tests run in parallel).
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let info = connection_info(&server.url(), Some("s3cret".into())).unwrap();
    let client = redis::Client::open(info).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn tls_urls_attempt_a_handshake() {
    // A plain server cannot speak TLS: the handshake fails, fast, as Unavailable (and the
    // crypto provider is in place, or rustls would panic).
    let server = RedisServer::start();
    let url = format!("rediss://:pw@127.0.0.1:{}", server.port);
    let t0 = Instant::now();
    let e = RedisBackend::connect(&url)
        .await
        .err()
        .expect("no TLS there");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert_eq!(e.exit_code(), 69, "{e}");
    assert!(!e.to_string().contains(":pw@"), "{e}");
}

#[tokio::test]
async fn a_paused_server_times_out_instead_of_hanging() {
    let server = RedisServer::start();
    let b = connect_fast(&server).await;
    take(&b, "frozen", "o").await;
    server.pause();
    let t0 = Instant::now();
    let e = b
        .renew("frozen", "o", Duration::from_secs(10))
        .await
        .unwrap_err();
    let elapsed = t0.elapsed();
    let e2 = b.acquire(&req("other", "o"), &forever()).await.err();
    server.resume();
    assert_eq!(e.exit_code(), 69);
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(elapsed < Duration::from_millis(1_500), "{elapsed:?}");
    assert!(matches!(e2, Some(Error::Unavailable(_))));
    b.renew("frozen", "o", Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test]
async fn reconnects_after_a_server_restart() {
    let mut server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "phoenix", "o1").await;
    server.restart();
    // The first call may find the old connection broken; a later one must work.
    let mut last = None;
    for _ in 0..3 {
        match b.acquire(&req("phoenix", "o2"), &no_wait()).await {
            Ok(got) => {
                last = Some(got.lease.owner);
                break;
            }
            Err(e) => assert_eq!(e.exit_code(), 69, "{e}"),
        }
    }
    assert_eq!(last.as_deref(), Some("o2"));
}

#[tokio::test]
async fn locks_work_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let Some((cert, key)) = self_signed(dir.path()) else {
        panic!("openssl is needed to make the test certificates (apt-get install openssl)");
    };
    let tls_port = support::free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-auth-clients",
        "no",
    ]);
    // `#insecure`: the certificate is self-signed; the connection is still TLS.
    let url = format!("rediss://127.0.0.1:{tls_port}/#insecure");
    let b = RedisBackend::connect(&url).await.expect("TLS connect");
    assert_eq!(take(&b, "secure", "o").await.lease.owner, "o");
    assert_eq!(server.cli(&["HGET", "dlock:{secure}:lease", "owner"]), "o");
    b.release("secure", "o", ReleaseMode::All).await.unwrap();
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
