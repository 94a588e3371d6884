//! The conformance suite: behavioural tests written once, run against every backend.
//!
//! Each test is a generic async function in [`suite`] that takes a *factory*: an async fn
//! returning a fresh backend and a guard that keeps whatever it needs alive (a temporary
//! directory, a redis-server). `conformance_suite!` (in `macros.rs`) instantiates every test
//! listed below for every backend, with the factories of `support::backends::factory`.
//!
//! The tests only rely on the trait's documented semantics (no backend-specific details
//! such as `ttl_left_ms` of bound leases), and each takes well under a second, except the TTL tests, which count in the backend's
//! TTL unit ([`TTL_UNIT`]: a tenth of a second, or a second on etcd).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dlock::backend::{Backend, ReleaseMode};

use crate::macros::Caps;
use crate::support::backends::factory::Guard;

/// The bound on an event-driven wake-up (hand-off, cancellation, no-wait refusal): far
/// above what any backend needs on an idle machine, but loaded two-core CI boxes can delay
/// a runnable task by tens of milliseconds.
pub const PROMPT: Duration = Duration::from_millis(200);

conformance_suite!(
    exclusion_under_contention,
    tokens_strictly_increase,
    owner_checks,
    detached_lease_expires,
    renewal_extends,
    reentrancy,
    force_release,
    status_named_and_all,
    no_wait_and_timeout,
    hand_off_is_prompt,
    release_acquired_hands_over,
    cancellation_leaves_nothing,
    errors_read_the_same,
    watch_returns_on_release,
    run_records_are_kept,
    linger_as_declared,
    watch_as_declared,
    queue_as_declared,
    sharing_as_declared,
);

tokio::task_local! {
    /// The TTL unit of the backend under test (`support::backends::ttl_unit`), set by
    /// `conformance_tests!` around each test: the TTL tests count in it, so one copy of them
    /// serves backends with millisecond TTLs and etcd, whose leases are whole seconds.
    pub static TTL_UNIT: Duration;

    /// The capabilities the backend under test declares (`macros::caps`), set
    /// by `conformance_tests!` beside [`TTL_UNIT`]: the `*_as_declared` tests check them.
    pub static CAPS: Caps;
}

/// The TTL unit of the backend under test.
pub(crate) fn unit() -> Duration {
    TTL_UNIT.get()
}

pub mod suite {
    pub use crate::capabilities::*;
    pub use crate::conformance_waiting::*;

    use super::*;
    use crate::support::{bound, forever, no_wait, refused, req, within};
    use dlock::backend::WaitOptions;
    use dlock::error::Error;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio_util::sync::CancellationToken;

    pub(crate) async fn held_by(b: &Arc<dyn Backend>, key: &str) -> Option<String> {
        let st = b.status(&[key.to_string()]).await.expect("status");
        st[0].lock.as_ref().map(|l| l.owner.clone())
    }

    /// 8 tasks × 20 cycles on one key: never two inside, tokens increase in grant order.
    pub async fn exclusion_under_contention<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let (b, _g) = factory().await;
        let inside = Arc::new(AtomicUsize::new(0));
        let grants = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (b, inside, grants) = (b.clone(), inside.clone(), grants.clone());
            tasks.push(tokio::spawn(async move {
                let owner = format!("task{i}");
                // Half bound (exec), half detached (lock), to exercise both hand-offs.
                let r = if i % 2 == 0 {
                    bound("contended", &owner)
                } else {
                    req("contended", &owner)
                };
                for _ in 0..20 {
                    let a = b.acquire(&r, &forever()).await.expect("acquire");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    grants.lock().unwrap().push(a.lease.fencing_token);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    b.release("contended", &owner, ReleaseMode::All)
                        .await
                        .expect("release");
                    drop(a.guard);
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let grants = grants.lock().unwrap().clone();
        assert_eq!(grants.len(), 160);
        assert!(
            grants.windows(2).all(|w| w[0] < w[1]),
            "tokens not increasing in grant order: {grants:?}"
        );
        assert_eq!(held_by(&b, "contended").await, None);
    }

    /// Every acquisition gets a larger token than any before it, per key.
    pub async fn tokens_strictly_increase<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let (b, _g) = factory().await;
        let mut last = 0;
        for i in 0..30 {
            let r = if i % 2 == 0 {
                req("mono", "o")
            } else {
                bound("mono", "o")
            };
            let a = b.acquire(&r, &no_wait()).await.expect("acquire");
            assert!(a.lease.fencing_token > last, "token went back");
            assert!(!a.lease.reentered);
            last = a.lease.fencing_token;
            b.release("mono", "o", ReleaseMode::One).await.unwrap();
        }
        // Another key has its own counter, which does not disturb this one.
        b.acquire(&req("other", "o"), &no_wait()).await.unwrap();
        let a = b.acquire(&req("mono", "o"), &no_wait()).await.unwrap();
        assert!(a.lease.fencing_token > last);
    }

    /// Renew and release by a wrong owner fail with NotOwner and change nothing.
    pub async fn owner_checks<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let (b, _g) = factory().await;
        let a = b.acquire(&req("k", "alice"), &no_wait()).await.unwrap();
        let ttl = Duration::from_secs(5);
        assert!(matches!(
            b.renew("k", "mallory", ttl).await,
            Err(Error::NotOwner(_))
        ));
        for mode in [ReleaseMode::One, ReleaseMode::All] {
            let e = b.release("k", "mallory", mode).await.unwrap_err();
            assert!(matches!(e, Error::NotOwner(_)), "{e}");
            assert_eq!(e.exit_code(), 77);
            assert!(e.to_string().contains('k'), "message names the key: {e}");
        }
        let st = b.status(&["k".to_string()]).await.unwrap();
        let lock = st[0].lock.as_ref().expect("still held");
        assert_eq!(lock.owner, "alice");
        assert_eq!(lock.fencing_token, a.lease.fencing_token);
        let renewed = b.renew("k", "alice", ttl).await.unwrap();
        assert_eq!(renewed.fencing_token, a.lease.fencing_token);
        let r = b.release("k", "alice", ReleaseMode::One).await.unwrap();
        assert_eq!(r.previous_owner.as_deref(), Some("alice"));
        assert!(!r.still_held);
        // Gone: renew and release now fail too.
        assert!(matches!(
            b.renew("k", "alice", ttl).await,
            Err(Error::NotOwner(_))
        ));
        assert!(matches!(
            b.release("k", "alice", ReleaseMode::One).await,
            Err(Error::NotOwner(_))
        ));
    }

    /// A detached lease ends at its TTL; its owner can then neither renew nor release it.
    pub async fn detached_lease_expires<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let tick = unit();
        let (b, _g) = factory().await;
        let mut r = req("exp", "a");
        r.ttl = tick * 3;
        let a = b.acquire(&r, &no_wait()).await.unwrap();
        assert!(b.acquire(&req("exp", "b"), &no_wait()).await.is_err());
        tokio::time::sleep(tick * 9 / 2).await;
        assert_eq!(held_by(&b, "exp").await, None);
        let c = b
            .acquire(&req("exp", "b"), &no_wait())
            .await
            .expect("expired");
        assert!(c.lease.fencing_token > a.lease.fencing_token);
        assert!(matches!(
            b.renew("exp", "a", Duration::from_secs(1).max(tick * 3))
                .await,
            Err(Error::NotOwner(_))
        ));
        assert!(matches!(
            b.release("exp", "a", ReleaseMode::All).await,
            Err(Error::NotOwner(_))
        ));
    }

    /// Renewing moves the expiry: the lease outlives its first TTL. It is renewed to the
    /// TTL it has, which every backend allows (an etcd lease keeps the TTL it was granted).
    pub async fn renewal_extends<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let tick = unit();
        let (b, _g) = factory().await;
        let mut r = req("ren", "a");
        r.ttl = tick * 6;
        b.acquire(&r, &no_wait()).await.unwrap();
        tokio::time::sleep(tick * 3).await;
        let l = b.renew("ren", "a", tick * 6).await.unwrap();
        assert_eq!(l.ttl, tick * 6);
        // Half-way between the first expiry (6) and the renewed one (9).
        tokio::time::sleep(tick * 9 / 2).await;
        assert_eq!(held_by(&b, "ren").await.as_deref(), Some("a"));
        assert!(b.acquire(&req("ren", "b"), &no_wait()).await.is_err());
        b.release("ren", "a", ReleaseMode::One).await.unwrap();
    }

    /// Owners in `reenter` nest: same owner and token, depth counts, One undoes one level.
    pub async fn reentrancy<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let (b, _g) = factory().await;
        let outer = b.acquire(&bound("re", "a"), &no_wait()).await.unwrap();
        let mut inner_req = req("re", "b");
        inner_req.reenter = vec!["x".into(), "a".into()];
        let inner = b.acquire(&inner_req, &no_wait()).await.unwrap();
        assert!(inner.lease.reentered);
        assert_eq!(inner.lease.owner, "a");
        assert_eq!(inner.lease.fencing_token, outer.lease.fencing_token);
        let depth = |st: Vec<dlock::backend::KeyStatus>| st[0].lock.as_ref().map(|l| l.depth);
        assert_eq!(depth(b.status(&["re".into()]).await.unwrap()), Some(2));
        // Someone not acting for "a" still waits.
        assert!(b.acquire(&req("re", "c"), &no_wait()).await.is_err());
        let r = b.release("re", "a", ReleaseMode::One).await.unwrap();
        assert!(r.still_held);
        assert_eq!(depth(b.status(&["re".into()]).await.unwrap()), Some(1));
        let r = b.release("re", "a", ReleaseMode::One).await.unwrap();
        assert!(!r.still_held);
        drop(outer.guard);
        assert_eq!(held_by(&b, "re").await, None);

        // All frees whatever the depth.
        let a = b.acquire(&req("re", "a"), &no_wait()).await.unwrap();
        for _ in 0..2 {
            b.acquire(&inner_req, &no_wait()).await.unwrap();
        }
        let r = b.release("re", "a", ReleaseMode::All).await.unwrap();
        assert!(!r.still_held);
        assert_eq!(held_by(&b, "re").await, None);
        drop(a);
    }

    /// Force frees whoever holds the key and says who that was.
    pub async fn force_release<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let (b, _g) = factory().await;
        let r = b.release("f", "admin", ReleaseMode::Force).await.unwrap();
        assert_eq!(r.previous_owner, None);
        for r in [req("f", "a"), bound("f", "a")] {
            let held = b.acquire(&r, &no_wait()).await.unwrap();
            let r = b.release("f", "admin", ReleaseMode::Force).await.unwrap();
            assert_eq!(r.previous_owner.as_deref(), Some("a"));
            assert!(!r.still_held);
            let next = b.acquire(&req("f", "b"), &no_wait()).await.expect("free");
            assert!(next.lease.fencing_token > held.lease.fencing_token);
            b.release("f", "b", ReleaseMode::All).await.unwrap();
            drop(held);
        }
    }

    /// Named keys come back in order, free ones without a lock; no key lists held keys.
    pub async fn status_named_and_all<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let (b, _g) = factory().await;
        let y = b.acquire(&req("st/y", "oy"), &no_wait()).await.unwrap();
        let _x = b.acquire(&bound("st x", "ox"), &no_wait()).await.unwrap();
        b.acquire(&req("st-free", "o"), &no_wait()).await.unwrap();
        b.release("st-free", "o", ReleaseMode::All).await.unwrap();

        let names: Vec<String> = ["st/y", "never-used", "st x"].map(String::from).to_vec();
        let st = b.status(&names).await.unwrap();
        assert_eq!(
            st.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
            ["st/y", "never-used", "st x"]
        );
        let ly = st[0].lock.as_ref().expect("st/y held");
        assert_eq!(ly.owner, "oy");
        assert_eq!(ly.fencing_token, y.lease.fencing_token);
        assert_eq!(ly.holder.host, "testhost");
        assert_eq!(ly.holder.pid, std::process::id());
        assert_eq!(ly.holder.user, "tester");
        assert_eq!(ly.holder.command, "test oy");
        assert!(ly.holder.acquired_at_ms > 0);
        assert_eq!(ly.depth, 1);
        assert!(st[1].lock.is_none());
        assert_eq!(st[2].lock.as_ref().unwrap().owner, "ox");

        let all = b.status(&[]).await.unwrap();
        assert_eq!(
            all.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
            ["st x", "st/y"],
            "every held key, sorted, no free key"
        );
    }

    /// Every error kind reads the same on every backend: the key quoted, the backend named,
    /// the same words for the same situation.
    pub async fn errors_read_the_same<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        let (b, _g) = factory().await;
        let d = b.describe();
        b.acquire(&req("w", "a"), &no_wait()).await.unwrap();
        let holder = format!("held by a (testhost pid {}: test a)", std::process::id());
        let e = refused(b.acquire(&req("w", "b"), &no_wait()).await);
        assert!(matches!(e, Error::NotObtained(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("lock 'w' is {holder} on ")),
            "{e}"
        );
        let e = refused(
            b.acquire(&req("w", "b"), &within(Duration::from_millis(300)))
                .await,
        );
        let msg = e.to_string();
        assert!(msg.starts_with("gave up after 3"), "{msg}");
        assert!(
            msg.contains(&format!(": lock 'w' is {holder} on ")),
            "{msg}"
        );
        let cancel = CancellationToken::new();
        cancel.cancel();
        let wait = WaitOptions {
            cancel,
            ..forever()
        };
        let e = refused(b.acquire(&req("w", "b"), &wait).await);
        assert_eq!(
            e.to_string(),
            format!("cancelled while waiting for lock 'w' on {d}")
        );
        let e = b.renew("w", "b", Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(e, Error::NotOwner(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("cannot renew lock 'w' on {d}: ")),
            "{e}"
        );
        b.release("w", "a", ReleaseMode::All).await.unwrap();
        let e = b.release("w", "a", ReleaseMode::One).await.unwrap_err();
        assert!(matches!(e, Error::NotOwner(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("cannot release lock 'w' on {d}: ")),
            "{e}"
        );
    }

    /// The last run and the last success of a key: each kept whole, a failure keeps the
    /// last success, keys apart, and records are never taken for locks.
    pub async fn run_records_are_kept<F, Fut>(factory: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
    {
        use dlock::backend::{LastRuns, RunRecord};
        let (b, _g) = factory().await;
        let key = "runs/a b";
        // Real times: a store may drop records older than RUN_RECORD_TTL.
        let now = dlock::backend::now_ms();
        assert_eq!(b.last_runs(key).await.unwrap(), LastRuns::default());
        let ok = RunRecord {
            owner: "o1".into(),
            fencing_token: 7,
            holder: req(key, "o1").holder,
            started_at_ms: now - 1_500,
            ended_at_ms: now,
            exit_code: 0,
            waited_ms: 12,
            ran_ms: 1_500,
            ..RunRecord::default()
        };
        b.record_run(key, &ok).await.unwrap();
        let runs = b.last_runs(key).await.unwrap();
        assert_eq!(runs.last.as_ref(), Some(&ok), "every field comes back");
        assert_eq!(runs.last_success.as_ref(), Some(&ok));

        let killed = RunRecord {
            owner: "o2".into(),
            fencing_token: 8,
            ended_at_ms: now + 500,
            exit_code: 137,
            signal: Some(9),
            ..ok.clone()
        };
        b.record_run(key, &killed).await.unwrap();
        let runs = b.last_runs(key).await.unwrap();
        assert_eq!(runs.last.as_ref(), Some(&killed));
        assert_eq!(runs.last_success.as_ref(), Some(&ok), "kept past a failure");

        assert_eq!(
            b.last_runs("runs/other").await.unwrap(),
            LastRuns::default()
        );
        assert!(b.status(&[]).await.unwrap().is_empty(), "no lock listed");
        let st = b.status(&[key.to_string()]).await.unwrap();
        assert!(st[0].lock.is_none());
        // The key can still be locked as usual next to its records.
        let held = b.acquire(&req(key, "o3"), &no_wait()).await.unwrap();
        assert_eq!(held_by(&b, key).await.as_deref(), Some("o3"));
        b.release(key, "o3", ReleaseMode::All).await.unwrap();
        drop(held);
    }
}
