//! The capabilities each backend declares (`macros::caps`, beside the backend
//! list of `macros.rs`), checked both ways on every backend as part of the conformance
//! suite: a backend declared to do a thing does it, and one declared not to does not, so
//! that the declarations the other tests decide from cannot go stale.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::{Backend, ReleaseMode, Sharing};
use dlock::error::Error;

use crate::conformance::suite::held_by;
use crate::conformance::{unit, CAPS, PROMPT};
use crate::support::backends::factory::Guard;
use crate::support::{self, bound, no_wait, refused, req};

const TENTH: Duration = Duration::from_millis(100);
const SECOND: Duration = Duration::from_secs(1);

/// Lingering (`exec --hold-at-least`): declared, a lease outlives its process and expires
/// by itself ([`linger_holds_then_expires`]); declared not (a session), `linger` holds the
/// key itself for the time left and lets it go.
pub async fn linger_as_declared<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    if CAPS.get().lingering {
        return linger_holds_then_expires(factory).await;
    }
    let (b, _g) = factory().await;
    let mut r = bound("hold", "a");
    r.ttl = Duration::from_secs(30);
    let a = b.acquire(&r, &no_wait()).await.unwrap();
    let left = unit() * 2;
    let t0 = Instant::now();
    b.linger(a, left).await.expect("linger");
    assert!(
        t0.elapsed() >= left - TENTH,
        "let go early: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        held_by(&b, "hold").await,
        None,
        "declared not lingering, yet the lease outlives its holder's linger"
    );
}

/// Notifications: declared, a watch sleeps until told ([`watch_sleeps_until_notified`]);
/// declared not, a watch on a held key that nothing changes returns after a poll, long
/// before its pause.
pub async fn watch_as_declared<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    if CAPS.get().notified {
        return watch_sleeps_until_notified(factory).await;
    }
    let (b, _g) = factory().await;
    let mut r = bound("n", "a");
    r.ttl = Duration::from_secs(30);
    let _a = b.acquire(&r, &no_wait()).await.unwrap();
    let keys = ["n".to_string()];
    for _ in 0..3 {
        let t0 = Instant::now();
        b.watch(&keys, Duration::from_secs(5)).await.unwrap();
        assert!(
            t0.elapsed() < SECOND,
            "declared polling, yet the watch slept {:?} with nothing changed",
            t0.elapsed()
        );
    }
}

/// A queue: declared, `status` lists a waiter once it waits (its owner and holder);
/// declared not, `status` cannot tell (`waiters` is `None`). Either way the waiter gets
/// the key once it is released.
pub async fn queue_as_declared<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let a = b.acquire(&bound("q", "a"), &no_wait()).await.unwrap();
    let (wait, waiting) = support::waiting_forever();
    let b2 = b.clone();
    let waiter = tokio::spawn(async move { b2.acquire(&req("q", "b"), &wait).await });
    waiting.await.expect("the waiter never waited");
    let st = b.status(&["q".into()]).await.unwrap();
    match (&st[0].waiters, CAPS.get().queue) {
        (Some(w), true) => {
            assert_eq!(w.len(), 1, "{w:?}");
            assert_eq!(w[0].holder.command, "test b", "{w:?}");
        }
        (None, false) => {}
        (w, queue) => panic!("declared queue: {queue}, yet status lists waiters {w:?}"),
    }
    b.release_acquired(a, ReleaseMode::All).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter never got the key")
        .unwrap()
        .expect("acquired");
    b.release_acquired(got, ReleaseMode::All).await.unwrap();
}

/// Sharing: declared, two readers (`Shared`) hold the key at once and a third caller of a
/// semaphore of two (`Limit(2)`) is refused while both hold it; declared not, both are
/// refused as a usage error naming the key.
pub async fn sharing_as_declared<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let ask = |key: &str, owner: &str, sharing: Sharing| {
        let mut r = req(key, owner);
        r.sharing = sharing;
        r
    };
    if !CAPS.get().sharing {
        for sharing in [Sharing::Shared, Sharing::Limit(2)] {
            let e = refused(b.acquire(&ask("s", "a", sharing), &no_wait()).await);
            assert!(matches!(e, Error::Usage(_)), "{e}");
            assert!(e.to_string().contains("'s'"), "{e}");
        }
        return;
    }
    let r1 = b
        .acquire(&ask("s", "r1", Sharing::Shared), &no_wait())
        .await;
    let r2 = b
        .acquire(&ask("s", "r2", Sharing::Shared), &no_wait())
        .await;
    let (r1, r2) = (
        r1.expect("a reader"),
        r2.expect("a second reader beside it"),
    );
    let st = b.status(&["s".into()]).await.unwrap();
    assert_eq!(st[0].holders.len(), 2, "{:?}", st[0]);
    for r in [r1, r2] {
        b.release_acquired(r, ReleaseMode::All).await.unwrap();
    }
    let n1 = b
        .acquire(&ask("n", "n1", Sharing::Limit(2)), &no_wait())
        .await;
    let n2 = b
        .acquire(&ask("n", "n2", Sharing::Limit(2)), &no_wait())
        .await;
    let (n1, n2) = (n1.expect("a first slot"), n2.expect("a second slot"));
    let third = b
        .acquire(&ask("n", "n3", Sharing::Limit(2)), &no_wait())
        .await;
    assert!(
        matches!(refused(third), Error::NotObtained(..)),
        "a third slot"
    );
    for n in [n1, n2] {
        b.release_acquired(n, ReleaseMode::All).await.unwrap();
    }
}

/// `linger`: a lease acquired as `exec` does stays held by its owner, with its token,
/// marked as finished, for what is left, then expires by itself; renewed for longer
/// during the run, it is cut to what is left.
async fn linger_holds_then_expires<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    linger_in(factory, unit() * 5).await
}

async fn linger_in<F, Fut>(factory: F, left: Duration)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let mut r = bound("hold", "a");
    r.ttl = Duration::from_secs(30);
    let a = b.acquire(&r, &no_wait()).await.unwrap();
    let token = a.lease.fencing_token;
    let t0 = Instant::now();
    b.linger(a, left).await.expect("linger");
    let st = b.status(&["hold".to_string()]).await.unwrap();
    let lock = st[0].lock.as_ref().expect("held after linger");
    assert_eq!((lock.owner.as_str(), lock.fencing_token), ("a", token));
    assert!(lock.holder.held_until_ms.is_some(), "{lock:?}");
    let ttl = lock.ttl_left_ms.expect("a lingering lease has an expiry");
    assert!(
        ttl <= (left + SECOND).as_millis() as u64,
        "not cut: {ttl}ms"
    );
    assert!(b.acquire(&req("hold", "b"), &no_wait()).await.is_err());
    let freed = async {
        while held_by(&b, "hold").await.is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(left + SECOND * 2, freed)
        .await
        .expect("still held long after the hold");
    assert!(
        t0.elapsed() >= left - TENTH,
        "freed early: {:?}",
        t0.elapsed()
    );
    let c = b.acquire(&req("hold", "b"), &no_wait()).await.unwrap();
    assert!(c.lease.fencing_token > token);
}

/// On a store with notifications, a watch on a held key does not return before its
/// pause while nothing changes (a poller would), and returns within [`PROMPT`] of a
/// release.
async fn watch_sleeps_until_notified<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Arc<dyn Backend>, Guard)>,
{
    let (b, _g) = factory().await;
    let keys = ["n".to_string()];
    let mut r = bound("n", "a");
    r.ttl = Duration::from_secs(30);
    let a = b.acquire(&r, &no_wait()).await.unwrap();
    let t0 = Instant::now();
    b.watch(&keys, Duration::from_millis(800)).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "returned after {:?} with nothing changed",
        t0.elapsed()
    );
    let b2 = b.clone();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        b2.release_acquired(a, ReleaseMode::All).await.unwrap();
        Instant::now()
    });
    b.watch(&keys, Duration::from_secs(10)).await.unwrap();
    let woke = Instant::now();
    let at = releaser.await.unwrap();
    assert!(
        woke.saturating_duration_since(at) < PROMPT,
        "woken {:?} after the release",
        woke.saturating_duration_since(at)
    );
}
