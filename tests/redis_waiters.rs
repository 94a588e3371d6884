//! Redis waiters through the library: arrival order, waiters that are dropped, die or are
//! unfair, a lease that expires without a message, one report per change, a cancelled
//! `BLPOP` on the CLI's one connection.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::redis_backend::{
    blocked, connect, connect_fast, eventually, now_ms, queue_len, subscribed, take,
};
use crate::support::{forever, no_wait, refused, req, served_order, RedisServer};
use dlock::backend::redis::{RedisBackend, Tuning};
use dlock::backend::{AcquireRequest, Acquired, Backend, ReleaseMode, WaitInfo, WaitOptions};
use dlock::error::Error;
use tokio_util::sync::CancellationToken;

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
    let order = served_order(&*b, "line", "first", &mut rx, 12).await;
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
