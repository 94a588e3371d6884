//! The conformance suite's tests of waiting (`conformance::suite` re-exports them): no-wait
//! and timeouts, a prompt hand-off, a release that hands over, a cancelled wait that leaves
//! nothing behind, a watch woken by a release.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::{AcquireRequest, Backend, ReleaseMode, WaitOptions};
use dlock::error::Error;
use tokio_util::sync::CancellationToken;

use crate::conformance::suite::held_by;
use crate::conformance::{CAPS, PROMPT};
use crate::support::backends::factory::Guard;
use crate::support::{self, bound, no_wait, refused, req, within};

/// No-wait fails at once, a timeout after about the timeout; both name key and holder.
pub async fn no_wait_and_timeout<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let _a = b.acquire(&bound("w", "holder1"), &no_wait()).await.unwrap();
    let t0 = Instant::now();
    let e = refused(b.acquire(&req("w", "b"), &no_wait()).await);
    assert!(t0.elapsed() < PROMPT);
    assert!(matches!(e, Error::NotObtained(_)), "{e}");
    assert_eq!(e.exit_code(), 75);
    let msg = e.to_string();
    assert!(msg.contains('w') && msg.contains("holder1"), "{msg}");
    assert!(msg.contains(&b.describe()), "{msg}");

    let t0 = Instant::now();
    let e = refused(
        b.acquire(&req("w", "b"), &within(Duration::from_millis(250)))
            .await,
    );
    let took = t0.elapsed();
    assert!(matches!(e, Error::NotObtained(_)), "{e}");
    assert!(e.to_string().contains("holder1"), "{e}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(250) + PROMPT,
        "timeout took {took:?}"
    );
    // A wait that is long enough succeeds.
    b.release("w", "holder1", ReleaseMode::All).await.unwrap();
    b.acquire(&req("w", "b"), &within(Duration::from_secs(1)))
        .await
        .unwrap();
}

/// A waiter gets the key promptly once it is released.
pub async fn hand_off_is_prompt<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    for (holder_req, waiter_req) in [
        (bound("h", "a"), bound("h", "b")),
        (req("h", "a"), req("h", "b")),
    ] {
        let a = b.acquire(&holder_req, &no_wait()).await.unwrap();
        let b2 = b.clone();
        let (wait, waiting) = support::waiting_forever();
        let waiter = tokio::spawn(async move {
            let got = b2.acquire(&waiter_req, &wait).await.unwrap();
            (Instant::now(), got)
        });
        waiting.await.expect("waiter got a held key");
        let released = Instant::now();
        b.release("h", "a", ReleaseMode::All).await.unwrap();
        drop(a.guard);
        let (got_at, got) = waiter.await.unwrap();
        let lag = got_at - released;
        assert!(lag < PROMPT, "hand-off took {lag:?}");
        assert!(got.lease.fencing_token > a.lease.fencing_token);
        b.release("h", "b", ReleaseMode::All).await.unwrap();
        drop(got.guard);
    }
}

/// `release_acquired` (what `exec` does last) ends the lease for the next waiter, and
/// for a re-entered lease only its own level.
pub async fn release_acquired_hands_over<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let a = b.acquire(&bound("r", "a"), &no_wait()).await.unwrap();
    let inner = AcquireRequest {
        reenter: vec!["a".into()],
        ..bound("r", "a2")
    };
    let nested = b.acquire(&inner, &no_wait()).await.unwrap();
    assert!(nested.lease.reentered);
    b.release_acquired(nested, ReleaseMode::One).await.unwrap();
    assert_eq!(
        held_by(&b, "r").await.as_deref(),
        Some("a"),
        "one level only"
    );

    let b2 = b.clone();
    let (wait, waiting) = support::waiting_forever();
    let waiter = tokio::spawn(async move { b2.acquire(&bound("r", "b"), &wait).await });
    waiting.await.expect("waiter got a held key");
    let token = a.lease.fencing_token;
    b.release_acquired(a, ReleaseMode::All).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not handed the key")
        .unwrap()
        .unwrap();
    assert!(got.lease.fencing_token > token);
    assert_eq!(held_by(&b, "r").await.as_deref(), Some("b"));
    let token = got.lease.fencing_token;
    b.release_acquired(got, ReleaseMode::All).await.unwrap();
    assert_eq!(held_by(&b, "r").await, None, "free after the last release");
    let again = b.acquire(&req("r", "c"), &no_wait()).await.unwrap();
    assert!(again.lease.fencing_token > token);
    b.release("r", "c", ReleaseMode::All).await.unwrap();
}

/// A cancelled wait returns Cancelled promptly and leaves nothing held or queued.
pub async fn cancellation_leaves_nothing<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let a = b.acquire(&bound("c", "a"), &no_wait()).await.unwrap();
    let cancel = CancellationToken::new();
    let (mut wait, waiting) = support::waiting_forever();
    wait.cancel = cancel.clone();
    let b2 = b.clone();
    let waiter = tokio::spawn(async move { b2.acquire(&req("c", "b"), &wait).await });
    waiting.await.expect("the waiter never waited");
    let t0 = Instant::now();
    cancel.cancel();
    let e = refused(waiter.await.unwrap());
    assert!(t0.elapsed() < PROMPT);
    assert!(matches!(e, Error::Cancelled(_, 0)), "{e}");
    let st = b.status(&["c".into()]).await.unwrap();
    assert_eq!(st[0].lock.as_ref().unwrap().owner, "a");
    match (&st[0].waiters, CAPS.get().queue) {
        (Some(w), true) => assert!(w.is_empty(), "cancelled waiter still queued: {w:?}"),
        (None, false) => {}
        (w, queue) => panic!("declared queue: {queue}, yet status lists waiters {w:?}"),
    }
    b.release("c", "a", ReleaseMode::All).await.unwrap();
    drop(a.guard);
    // Nobody is queued ahead of a newcomer, and the cancelled waiter took nothing.
    let c = b.acquire(&req("c", "c"), &no_wait()).await.expect("free");
    assert_eq!(held_by(&b, "c").await.as_deref(), Some("c"));
    b.release("c", "c", ReleaseMode::All).await.unwrap();
    drop(c);
    // Cancelling before the wait even starts returns Cancelled too, holding nothing.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let hold = b.acquire(&req("c", "a"), &no_wait()).await.unwrap();
    let wait = WaitOptions {
        cancel,
        ..WaitOptions::until(None)
    };
    let e = refused(b.acquire(&req("c", "b"), &wait).await);
    assert!(matches!(e, Error::Cancelled(_, 0)), "{e}");
    drop(hold);
}

/// `watch` returns at once on a free key, and within [`PROMPT`] of a release.
pub async fn watch_returns_on_release<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let keys = ["w".to_string()];
    let t0 = Instant::now();
    b.watch(&keys, Duration::from_secs(10)).await.unwrap();
    assert!(t0.elapsed() < PROMPT * 5, "free key: {:?}", t0.elapsed());
    b.acquire(&req("w", "a"), &no_wait()).await.unwrap();
    let released = Arc::new(std::sync::Mutex::new(None));
    let (b2, at) = (b.clone(), released.clone());
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        b2.release("w", "a", ReleaseMode::All).await.unwrap();
        *at.lock().unwrap() = Some(Instant::now());
    });
    // Look and watch as `dlock wait` does, until the key is free.
    while held_by(&b, "w").await.is_some() {
        b.watch(&keys, Duration::from_secs(10)).await.unwrap();
    }
    let woke = Instant::now();
    releaser.await.unwrap();
    let at = released.lock().unwrap().expect("released");
    assert!(
        woke.saturating_duration_since(at) < PROMPT,
        "woken {:?} after the release",
        woke.saturating_duration_since(at)
    );
}
