//! The waiting loop against the in-memory store, with tokio's clock paused: time moves only
//! when every task is idle, so "how long did it wait" has an exact answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{acquire, backoff, BRIEF_RIDE_OUT, RIDE_OUT};
use crate::backend::memory::MemoryStore;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    AcquireRequest, Backend, Holder, KeyStatus, Lease, ReleaseMode, Released, WaitOptions,
    CANCEL_GRACE,
};
use crate::error::{Error, Result};

fn req(key: &str, owner: &str) -> AcquireRequest {
    AcquireRequest {
        key: key.into(),
        owner: owner.into(),
        reenter: Vec::new(),
        ttl: Duration::from_secs(60),
        holder: Holder::default(),
        detached: true,
        fair: true,
        sharing: Default::default(),
        queue: Default::default(),
    }
}

fn within(d: Duration) -> WaitOptions {
    WaitOptions::until(Some((Instant::now() + d).into_std()))
}

fn forever() -> WaitOptions {
    WaitOptions::until(None)
}

async fn queue_len(store: &MemoryStore, key: &str) -> usize {
    let st = Backend::status(store, &[key.to_string()]).await.unwrap();
    st[0].waiters.as_ref().map_or(0, Vec::len)
}

/// Runs until `store` has `n` waiters on `key` (time stands still meanwhile).
async fn until_queued(store: &MemoryStore, key: &str, n: usize) {
    while queue_len(store, key).await < n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn gives_up_at_the_deadline_after_one_last_attempt() {
    let store = MemoryStore::new("t");
    acquire(&store, &req("k", "a"), &forever()).await.unwrap();
    let t0 = Instant::now();
    let e = acquire(&store, &req("k", "b"), &within(Duration::from_millis(2500)))
        .await
        .unwrap_err();
    assert_eq!(t0.elapsed(), Duration::from_millis(2500));
    let msg = e.to_string();
    assert!(matches!(e, Error::NotObtained(_)), "{e:?}");
    assert!(
        msg.starts_with("gave up after 2s 500ms: lock 'k' is held by a ("),
        "{msg}"
    );
    assert!(msg.ends_with("on memory://t"), "{msg}");
    assert_eq!(queue_len(&store, "k").await, 0, "left in the queue");
}

#[tokio::test(start_paused = true)]
async fn no_wait_says_who_holds_it_and_does_not_queue() {
    let store = MemoryStore::new("t");
    acquire(&store, &req("k", "a"), &forever()).await.unwrap();
    let now = WaitOptions::until(Some(Instant::now().into_std()));
    let e = acquire(&store, &req("k", "b"), &now).await.unwrap_err();
    assert!(e.to_string().starts_with("lock 'k' is held by a ("), "{e}");
    assert_eq!(queue_len(&store, "k").await, 0);
}

/// A store that keeps only exclusive leases (the in-memory one) refuses `--shared` and
/// `--limit N` before touching anything: one line naming the key and the store, exit 2.
#[tokio::test(start_paused = true)]
async fn sharing_a_store_cannot_keep_is_refused_before_anything() {
    let store = MemoryStore::new("t");
    for (sharing, asked) in [
        (crate::backend::Sharing::Shared, "--shared"),
        (crate::backend::Sharing::Limit(3), "--limit 3"),
    ] {
        let ask = AcquireRequest {
            sharing,
            ..req("k", "b")
        };
        let e = acquire(&store, &ask, &forever()).await.unwrap_err();
        assert_eq!(e.exit_code(), crate::exit::USAGE, "{e}");
        assert_eq!(
            e.to_string(),
            format!("lock 'k': {asked} is not supported on memory://t")
        );
        let st = Backend::status(&store, &["k".to_string()]).await.unwrap();
        assert!(st[0].lock.is_none() && queue_len(&store, "k").await == 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_while_sleeping_leaves_the_queue() {
    let store = Arc::new(MemoryStore::new("t"));
    acquire(&*store, &req("k", "a"), &forever()).await.unwrap();
    let wait = forever();
    let cancel = wait.cancel.clone();
    let s = store.clone();
    let waiter = tokio::spawn(async move { acquire(&*s, &req("k", "b"), &wait).await });
    until_queued(&store, "k", 1).await;
    let t0 = Instant::now();
    cancel.cancel();
    let e = waiter.await.unwrap().unwrap_err();
    assert_eq!(t0.elapsed(), Duration::ZERO, "the cancel was not immediate");
    assert_eq!(
        e.to_string(),
        "cancelled while waiting for lock 'k' on memory://t"
    );
    assert_eq!(queue_len(&store, "k").await, 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_while_an_attempt_hangs_is_immediate() {
    let store = Arc::new(MemoryStore::new("t"));
    store.stall(true);
    let wait = forever();
    let cancel = wait.cancel.clone();
    let s = store.clone();
    let waiter = tokio::spawn(async move { acquire(&*s, &req("k", "b"), &wait).await });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!waiter.is_finished());
    cancel.cancel();
    let e = waiter.await.unwrap().unwrap_err();
    assert!(matches!(e, Error::Cancelled(..)), "{e:?}");
    store.stall(false);
    let st = Backend::status(&*store, &["k".to_string()]).await.unwrap();
    assert!(st[0].lock.is_none(), "a lease was left held");
}

#[tokio::test(start_paused = true)]
async fn a_grant_that_raced_a_cancel_is_given_back() {
    let store = MemoryStore::new("t");
    let wait = forever();
    // The cancel lands while the granting attempt is on its way back.
    let cancel = wait.cancel.clone();
    store.on_granted(move || cancel.cancel());
    let e = acquire(&store, &req("k", "b"), &wait).await.unwrap_err();
    assert!(matches!(e, Error::Cancelled(..)), "{e:?}");
    let st = Backend::status(&store, &["k".to_string()]).await.unwrap();
    assert!(
        st[0].lock.is_none(),
        "the raced grant was kept: {:?}",
        st[0].lock
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_between_attempt_and_sleep_is_not_missed() {
    let store = Arc::new(MemoryStore::new("t"));
    acquire(&*store, &req("k", "a"), &forever()).await.unwrap();
    let s = store.clone();
    // Released synchronously right after the refusal, before the waiter goes to sleep.
    store.on_refused(move || {
        let s = s.clone();
        futures_util::FutureExt::now_or_never(async move {
            Backend::release(&*s, "k", "a", ReleaseMode::All).await
        });
    });
    let t0 = Instant::now();
    let got = acquire(&*store, &req("k", "b"), &forever()).await.unwrap();
    assert_eq!(got.lease.owner, "b");
    assert!(
        t0.elapsed() < Duration::from_millis(1),
        "slept through the release"
    );
}

#[tokio::test(start_paused = true)]
async fn a_spurious_wake_up_is_harmless() {
    let store = Arc::new(MemoryStore::new("t"));
    acquire(&*store, &req("k", "a"), &forever()).await.unwrap();
    let reports = Arc::new(AtomicUsize::new(0));
    let r = reports.clone();
    let wait = WaitOptions {
        progress: Some(Arc::new(move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        })),
        ..forever()
    };
    let s = store.clone();
    let waiter = tokio::spawn(async move { acquire(&*s, &req("k", "b"), &wait).await });
    until_queued(&store, "k", 1).await;
    for _ in 0..5 {
        store.poke();
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !waiter.is_finished(),
        "a wake-up without a release ended the wait"
    );
    assert_eq!(
        reports.load(Ordering::SeqCst),
        1,
        "nothing changed, yet it was reported again"
    );
    assert_eq!(queue_len(&store, "k").await, 1);
    Backend::release(&*store, "k", "a", ReleaseMode::All)
        .await
        .unwrap();
    assert_eq!(waiter.await.unwrap().unwrap().lease.owner, "b");
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_arrival_order() {
    let store = Arc::new(MemoryStore::new("t"));
    acquire(&*store, &req("k", "a"), &forever()).await.unwrap();
    let mut waiters = Vec::new();
    for (i, name) in ["b", "c", "d"].iter().enumerate() {
        let s = store.clone();
        let r = req("k", name);
        waiters.push(tokio::spawn(
            async move { acquire(&*s, &r, &forever()).await },
        ));
        until_queued(&store, "k", i + 1).await;
    }
    let mut holder = "a".to_string();
    for w in waiters {
        Backend::release(&*store, "k", &holder, ReleaseMode::All)
            .await
            .unwrap();
        holder = w.await.unwrap().unwrap().lease.owner;
    }
    assert_eq!(holder, "d");
}

#[tokio::test(start_paused = true)]
async fn an_expiring_lease_is_taken_when_it_expires() {
    let store = MemoryStore::new("t");
    let mut short = req("k", "a");
    short.ttl = Duration::from_millis(1500);
    acquire(&store, &short, &forever()).await.unwrap();
    let t0 = Instant::now();
    let got = acquire(&store, &req("k", "b"), &forever()).await.unwrap();
    assert_eq!(got.lease.fencing_token, 2);
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(1500),
        "not woken at the expiry"
    );
}

#[test]
fn backoff_grows_is_jittered_and_bounded() {
    for round in 0..40 {
        let cap = Duration::from_millis(10 << round.min(7)).min(Duration::from_secs(1));
        for _ in 0..20 {
            let d = backoff(round);
            assert!(d >= cap / 2 && d <= cap, "round {round}: {d:?}");
        }
    }
    let draws: std::collections::HashSet<_> = (0..50).map(|_| backoff(6)).collect();
    assert!(draws.len() > 5, "no jitter: {draws:?}");
}

/// The in-memory store, with faults: leaving after a cancel never ends (a store that
/// stopped answering), and the next `failing` attempts fail with `fault`.
struct Faulty {
    store: MemoryStore,
    silent_after_cancel: bool,
    failing: AtomicUsize,
    fault: fn() -> Error,
}

impl Faulty {
    fn silent_after_cancel() -> Faulty {
        Faulty {
            silent_after_cancel: true,
            ..Faulty::failing(0, || Error::Transient("unused".into()))
        }
    }

    fn failing(n: usize, fault: fn() -> Error) -> Faulty {
        Faulty {
            store: MemoryStore::new("t"),
            silent_after_cancel: false,
            failing: AtomicUsize::new(n),
            fault,
        }
    }
}

#[async_trait::async_trait]
impl LockStore for Faulty {
    type Waiter = <MemoryStore as LockStore>::Waiter;

    fn describe(&self) -> String {
        LockStore::describe(&self.store)
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<Self::Waiter> {
        self.store.begin(req).await
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        waiter: &mut Self::Waiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        let failing = self.failing.load(Ordering::SeqCst);
        if failing > 0 {
            self.failing.store(failing - 1, Ordering::SeqCst);
            return Err((self.fault)());
        }
        self.store.attempt(req, waiter, enqueue).await
    }

    async fn sleep(
        &self,
        req: &AcquireRequest,
        waiter: &mut Self::Waiter,
        busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        self.store.sleep(req, waiter, busy, pause, round).await
    }

    async fn leave(&self, req: &AcquireRequest, waiter: Self::Waiter) {
        self.store.leave(req, waiter).await
    }

    async fn leave_cancelled(&self, req: &AcquireRequest, waiter: Self::Waiter) {
        match self.silent_after_cancel {
            true => std::future::pending().await,
            false => self.store.leave(req, waiter).await,
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        LockStore::renew(&self.store, key, owner, ttl).await
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        LockStore::release(&self.store, key, owner, mode).await
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        LockStore::status(&self.store, keys).await
    }

    async fn record_run(&self, key: &str, _run: &crate::backend::RunRecord) -> Result<()> {
        Err(crate::error::Error::Internal(format!(
            "{key}: run records are not kept by {} yet",
            LockStore::describe(self)
        )))
    }

    async fn last_runs(&self, _key: &str) -> Result<crate::backend::LastRuns> {
        Ok(crate::backend::LastRuns::default())
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_returns_within_the_grace_even_when_leaving_hangs() {
    let store = Arc::new(Faulty::silent_after_cancel());
    acquire(&*store, &req("k", "a"), &forever()).await.unwrap();
    let wait = forever();
    let cancel = wait.cancel.clone();
    let s = store.clone();
    let waiter = tokio::spawn(async move { acquire(&*s, &req("k", "b"), &wait).await });
    until_queued(&store.store, "k", 1).await;
    let t0 = Instant::now();
    cancel.cancel();
    let e = waiter.await.unwrap().unwrap_err();
    assert_eq!(t0.elapsed(), CANCEL_GRACE);
    assert!(matches!(e, Error::Cancelled(..)), "{e:?}");
}

fn transient() -> Error {
    Error::Transient("Lock wait timeout exceeded".into())
}

#[tokio::test(start_paused = true)]
async fn a_waiter_rides_out_transient_failures_and_gets_the_lock() {
    let store = Faulty::failing(5, transient);
    let t0 = Instant::now();
    let got = acquire(&store, &req("k", "a"), &within(Duration::from_secs(20))).await;
    assert!(got.is_ok(), "{:?}", got.err());
    assert!(t0.elapsed() < RIDE_OUT, "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_store_that_keeps_failing_is_reported_after_the_ride_out() {
    let store = Faulty::failing(usize::MAX, transient);
    let t0 = Instant::now();
    let e = acquire(&store, &req("k", "a"), &forever())
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), crate::exit::UNAVAILABLE, "{e}");
    let took = t0.elapsed();
    assert!(
        took >= RIDE_OUT && took < RIDE_OUT + Duration::from_secs(2),
        "{took:?}"
    );
    // Within a shorter deadline, the deadline ends it.
    let store = Faulty::failing(usize::MAX, transient);
    let t0 = Instant::now();
    let e = acquire(&store, &req("k", "a"), &within(Duration::from_secs(3)))
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), crate::exit::UNAVAILABLE, "{e}");
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_failure_that_is_not_transient_ends_the_wait_at_once() {
    let store = Faulty::failing(1, || Error::Unavailable("password refused".into()));
    let t0 = Instant::now();
    let e = acquire(&store, &req("k", "a"), &forever())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "password refused");
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn no_wait_rides_out_a_failing_store_briefly() {
    // A store that comes back within the brief ride-out answers the one try.
    let store = Faulty::failing(3, transient);
    let now = WaitOptions::until(Some(Instant::now().into_std()));
    let got = acquire(&store, &req("k", "a"), &now).await;
    assert!(got.is_ok(), "{:?}", got.err());
    // One that keeps failing is reported when it is over, and not later.
    let store = Faulty::failing(usize::MAX, transient);
    let t0 = Instant::now();
    let now = WaitOptions::until(Some(t0.into_std()));
    let e = acquire(&store, &req("k", "a"), &now).await.unwrap_err();
    assert_eq!(e.exit_code(), crate::exit::UNAVAILABLE, "{e}");
    assert_eq!(t0.elapsed(), BRIEF_RIDE_OUT);
}

#[tokio::test(start_paused = true)]
async fn reaching_a_store_rides_out_transient_failures_until_the_time_allowed() {
    use super::{reach, ride_out_within};
    use std::sync::atomic::AtomicU32;
    let tries = AtomicU32::new(0);
    let open = || async {
        match tries.fetch_add(1, Ordering::SeqCst) {
            0..=4 => Err(transient()),
            _ => Ok(()),
        }
    };
    let until = (Instant::now() + ride_out_within(Some(Duration::from_secs(5)))).into_std();
    assert!(reach("t", until, open).await.is_ok());
    // Down for the whole time allowed: what the store said, at the end of it.
    let t0 = Instant::now();
    let until = (t0 + ride_out_within(Some(Duration::ZERO))).into_std();
    let e = reach("t", until, || async { Err::<(), _>(transient()) })
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Transient(_)), "{e:?}");
    assert_eq!(t0.elapsed(), BRIEF_RIDE_OUT);
    // A failure that will not pass ends it at once.
    let t0 = Instant::now();
    let until = (t0 + ride_out_within(None)).into_std();
    let refused = || async { Err::<(), _>(Error::Unavailable("password refused".into())) };
    assert!(reach("t", until, refused).await.is_err());
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

/// A try that began before the deadline and failed after it (a server starting, which
/// listens and does not answer yet) is followed by one more, and only one.
#[tokio::test(start_paused = true)]
async fn a_try_that_fails_past_the_deadline_is_followed_by_one_more() {
    use super::reach;
    use std::sync::atomic::AtomicU32;
    let (tries, slow_ones) = (AtomicU32::new(0), 1);
    let open = || async {
        if tries.fetch_add(1, Ordering::SeqCst) < slow_ones {
            tokio::time::sleep(Duration::from_secs(3)).await;
            return Err(transient());
        }
        Ok(())
    };
    let until = (Instant::now() + Duration::from_secs(2)).into_std();
    assert!(reach("t", until, open).await.is_ok());
    assert_eq!(tries.load(Ordering::SeqCst), 2);
    // Still not answering: the last try is dropped LATE past the deadline.
    let (tries, t0) = (AtomicU32::new(0), Instant::now());
    let slow = || async {
        tries.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3)).await;
        Err::<(), _>(transient())
    };
    let until = (t0 + Duration::from_secs(2)).into_std();
    assert!(reach("t", until, slow).await.is_err());
    assert_eq!(
        (tries.load(Ordering::SeqCst), t0.elapsed()),
        (2, Duration::from_secs(4))
    );
}

#[tokio::test(start_paused = true)]
async fn a_backoff_is_bounded_by_twice_the_holds_seen() {
    use super::{backoff_within, Holds};
    use crate::backend::LockInfo;
    let busy = |token| Busy {
        holder: Some(LockInfo {
            key: "k".into(),
            owner: "o".into(),
            fencing_token: token,
            holder: Holder::default(),
            ttl_left_ms: None,
            depth: 1,
        }),
        ..Busy::default()
    };
    let mut holds = Holds::default();
    for token in 1..=10 {
        holds.saw(&busy(token));
        tokio::time::advance(Duration::from_millis(5)).await;
    }
    assert_eq!(holds.typical(), Duration::from_millis(5));
    for round in [0, 5, 40] {
        let nap = backoff_within(round, holds.typical());
        assert!(nap <= Duration::from_millis(10), "{nap:?}");
    }
    // One holder keeping the key: the bound grows with the wait, up to the usual cap.
    holds.saw(&busy(10));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(holds.typical() > Duration::from_millis(400));
    assert!(backoff_within(40, holds.typical()) >= Duration::from_millis(500));
    assert!(backoff_within(40, holds.typical()) <= Duration::from_secs(1));
}
