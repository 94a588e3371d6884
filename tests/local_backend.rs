//! The embedded local store through the library API: what the conformance suite cannot
//! say about every backend (files, crash safety, bound leases, FIFO). Holders and waiters
//! in other processes, killed or stopped, are `local_processes.rs`.
//!
//! Every test works in its own temporary directory, never in the default one.

use crate::support::{self, bound, forever, no_wait, refused, req};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock::backend::local::LocalBackend;
use dlock::backend::{Backend, ReleaseMode, WaitInfo, WaitOptions};
use dlock::error::Error;
use tokio_util::sync::CancellationToken;

/// The bound on an event-driven wake-up (a hand-off, a cancellation, a timeout's lateness).
/// On an idle machine these take well under a millisecond; the margin absorbs scheduling
/// delays on a loaded two-core box, and is still below the 250 ms recheck, so a test
/// cannot pass by falling back on polling.
pub(crate) const PROMPT: Duration = Duration::from_millis(200);

pub(crate) fn store() -> (tempfile::TempDir, Arc<LocalBackend>) {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    (dir, Arc::new(b))
}

pub(crate) async fn owner_of(b: &LocalBackend, key: &str) -> Option<String> {
    let st = b.status(&[key.to_string()]).await.unwrap();
    st[0].lock.as_ref().map(|l| l.owner.clone())
}

#[tokio::test]
async fn round_trip_and_files() {
    let dir = tempfile::tempdir().unwrap();
    // A missing directory is created, parents included.
    let root = dir.path().join("a/b");
    let b = LocalBackend::open(&root).unwrap();
    assert_eq!(b.describe(), format!("file://{}", root.display()));

    let a = b.acquire(&bound("job", "o1"), &no_wait()).await.unwrap();
    assert_eq!(a.lease.key, "job");
    assert_eq!(a.lease.owner, "o1");
    assert!(a.lease.fencing_token >= 1);
    assert!(a.guard.is_some(), "a bound lease comes with its lock");
    let path = b.key_path("job");
    assert_eq!(path, root.join("job.dlock"));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o666, "shared with other users whatever the umask");

    let st = b.status(&["job".into()]).await.unwrap();
    let lock = st[0].lock.as_ref().unwrap();
    assert_eq!(lock.ttl_left_ms, None, "bound leases have no TTL");
    assert_eq!(st[0].waiters, Some(vec![]));

    let r = b.release("job", "o1", ReleaseMode::All).await.unwrap();
    assert_eq!(r.previous_owner.as_deref(), Some("o1"));
    drop(a.guard);
    assert_eq!(owner_of(&b, "job").await, None);

    // Detached: no guard, a TTL.
    let d = b.acquire(&req("job", "o2"), &no_wait()).await.unwrap();
    assert!(d.guard.is_none());
    let st = b.status(&["job".into()]).await.unwrap();
    let left = st[0].lock.as_ref().unwrap().ttl_left_ms.unwrap();
    assert!(left > 5_000 && left <= 10_000, "{left}");
}

#[tokio::test]
async fn tokens_survive_reopening_and_reboots() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = 0;
    for round in 0..3 {
        let b = LocalBackend::open(dir.path()).unwrap();
        for _ in 0..5 {
            let a = b.acquire(&req("k", "o"), &no_wait()).await.unwrap();
            assert!(a.lease.fencing_token > last, "round {round}");
            if last > 0 {
                assert_eq!(a.lease.fencing_token, last + 1, "same boot: no gaps");
            }
            last = a.lease.fencing_token;
            b.release("k", "o", ReleaseMode::All).await.unwrap();
        }
    }
    // After a reboot, writes that were not synced may be lost: the counter jumps to the
    // durable ceiling, above every token handed out, and goes on from there.
    let rebooted = LocalBackend::open_with_boot_id(dir.path(), "another-boot".into()).unwrap();
    let a = rebooted.acquire(&req("k", "o"), &no_wait()).await.unwrap();
    assert!(a.lease.fencing_token > last);
    assert!(
        a.lease.fencing_token <= last + 1025,
        "{}",
        a.lease.fencing_token
    );
    last = a.lease.fencing_token;
    rebooted.release("k", "o", ReleaseMode::All).await.unwrap();
    let b = rebooted.acquire(&req("k", "o"), &no_wait()).await.unwrap();
    assert_eq!(b.lease.fencing_token, last + 1);
}

#[tokio::test]
async fn wrong_owner_changes_nothing() {
    let (_d, b) = store();
    let _a = b.acquire(&req("k", "alice"), &no_wait()).await.unwrap();
    let path = b.key_path("k");
    let before = std::fs::read(&path).unwrap();
    for mode in [ReleaseMode::One, ReleaseMode::All] {
        let e = b.release("k", "bob", mode).await.unwrap_err();
        assert_eq!(e.exit_code(), 77);
        assert!(
            e.to_string().contains("held by another owner, not bob"),
            "{e}"
        );
    }
    let e = b
        .renew("k", "bob", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotOwner(_)));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was not touched"
    );
    // Unknown keys: nothing to release, and no file appears.
    assert!(matches!(
        b.release("nope", "bob", ReleaseMode::One).await,
        Err(Error::NotOwner(_))
    ));
    assert!(!b.key_path("nope").exists());
}

#[tokio::test]
async fn bound_lease_ignores_ttl_and_ends_with_its_guard() {
    let (_d, b) = store();
    let mut r = bound("k", "a");
    r.ttl = Duration::from_millis(150);
    let a = b.acquire(&r, &no_wait()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        owner_of(&b, "k").await.as_deref(),
        Some("a"),
        "TTL not enforced"
    );
    assert!(b.acquire(&req("k", "b"), &no_wait()).await.is_err());
    assert!(b.renew("k", "a", Duration::from_millis(150)).await.is_ok());
    // Dropping the guard without releasing (a crashed holder) frees the key at once.
    drop(a.guard);
    assert_eq!(
        owner_of(&b, "k").await,
        None,
        "stale bound lease shows as free"
    );
    assert!(matches!(
        b.renew("k", "a", Duration::from_secs(1)).await,
        Err(Error::NotOwner(_))
    ));
    let c = b.acquire(&req("k", "b"), &no_wait()).await.unwrap();
    assert!(c.lease.fencing_token > a.lease.fencing_token);
}

#[tokio::test]
async fn timeouts_keep_their_margins() {
    let (_d, b) = store();
    let _a = b.acquire(&bound("k", "holder"), &no_wait()).await.unwrap();
    for ms in [50u64, 300] {
        let t0 = Instant::now();
        let wait = WaitOptions::until(Some(t0 + Duration::from_millis(ms)));
        let e = refused(b.acquire(&req("k", "w"), &wait).await);
        let took = t0.elapsed();
        assert!(matches!(e, Error::NotObtained(_)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("holder") && msg.contains("testhost"), "{msg}");
        assert!(msg.contains(&b.describe()), "{msg}");
        assert!(
            took >= Duration::from_millis(ms) && took < Duration::from_millis(ms) + PROMPT,
            "{ms} ms timeout took {took:?}"
        );
    }
    let st = b.status(&["k".into()]).await.unwrap();
    assert_eq!(
        st[0].waiters,
        Some(vec![]),
        "timed-out waiters leave the queue"
    );
}

#[tokio::test]
async fn cancelled_waiters_leave_the_queue() {
    let (_d, b) = store();
    let a = b.acquire(&bound("k", "a"), &no_wait()).await.unwrap();
    let cancel = CancellationToken::new();
    let (mut wait, waiting) = support::waiting_forever();
    wait.cancel = cancel.clone();
    let first = {
        let b = b.clone();
        tokio::spawn(async move {
            b.acquire(&bound("k", "first"), &wait)
                .await
                .map(|a| a.lease)
        })
    };
    waiting.await.expect("first never waited");
    let (wait, waiting) = support::waiting_forever();
    let second = {
        let b = b.clone();
        tokio::spawn(async move {
            let got = b.acquire(&bound("k", "second"), &wait).await.unwrap();
            (Instant::now(), got)
        })
    };
    waiting.await.expect("second never waited");
    let waiters = |st: Vec<dlock::backend::KeyStatus>| -> Vec<String> {
        st[0]
            .waiters
            .clone()
            .unwrap()
            .into_iter()
            .map(|w| w.id)
            .collect()
    };
    assert_eq!(
        waiters(b.status(&["k".into()]).await.unwrap()),
        ["first", "second"]
    );
    cancel.cancel();
    assert!(matches!(first.await.unwrap(), Err(Error::Cancelled(_, 0))));
    assert_eq!(waiters(b.status(&["k".into()]).await.unwrap()), ["second"]);
    // The head left: the second waiter now takes the key at once on release.
    let released = Instant::now();
    b.release("k", "a", ReleaseMode::All).await.unwrap();
    drop(a.guard);
    let (at, got) = second.await.unwrap();
    assert!(at - released < PROMPT, "{:?}", at - released);
    assert_eq!(got.lease.owner, "second");
    let st = b.status(&["k".into()]).await.unwrap();
    assert_eq!(st[0].waiters, Some(vec![]));
}

#[tokio::test]
async fn waiters_are_served_in_arrival_order() {
    let (_d, b) = store();
    let a = b.acquire(&bound("fifo", "a"), &no_wait()).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (b, order) = (b.clone(), order.clone());
        // Alternate bound and detached waiters: both queue the same way.
        let r = if i % 2 == 0 {
            bound("fifo", &format!("w{i}"))
        } else {
            req("fifo", &format!("w{i}"))
        };
        let (wait, waiting) = support::waiting_forever();
        tasks.push(tokio::spawn(async move {
            let got = b.acquire(&r, &wait).await.unwrap();
            order.lock().unwrap().push(i);
            b.release("fifo", &r.owner, ReleaseMode::All).await.unwrap();
            drop(got.guard);
        }));
        // Each waiter is queued before the next one starts: a known arrival order.
        waiting.await.expect("a waiter never waited");
    }
    let st = b.status(&["fifo".into()]).await.unwrap();
    let queued: Vec<String> = st[0]
        .waiters
        .iter()
        .flatten()
        .map(|w| w.id.clone())
        .collect();
    let expected: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
    assert_eq!(queued, expected);
    b.release("fifo", "a", ReleaseMode::All).await.unwrap();
    drop(a.guard);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..12).collect::<Vec<_>>());
}

#[tokio::test]
async fn detached_unlock_wakes_the_waiter_at_once() {
    let (_d, b) = store();
    b.acquire(&req("d", "a"), &no_wait()).await.unwrap();
    let (wait, waiting) = support::waiting_forever();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let got = b.acquire(&bound("d", "w"), &wait).await.unwrap();
            (Instant::now(), got)
        })
    };
    waiting.await.expect("the waiter never waited");
    let released = Instant::now();
    b.release("d", "a", ReleaseMode::All).await.unwrap();
    let (at, _got) = waiter.await.unwrap();
    assert!(at - released < PROMPT, "{:?}", at - released);
}

#[tokio::test]
async fn force_unlock_of_a_live_bound_lease_lets_the_waiter_in() {
    let (_d, b) = store();
    let a = b.acquire(&bound("f", "a"), &no_wait()).await.unwrap();
    let (wait, waiting) = support::waiting_forever();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&bound("f", "w"), &wait).await.unwrap() })
    };
    waiting.await.expect("the waiter never waited");
    let t0 = Instant::now();
    let r = b.release("f", "x", ReleaseMode::Force).await.unwrap();
    assert_eq!(r.previous_owner.as_deref(), Some("a"));
    let got = waiter.await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(600),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(got.lease.owner, "w");
    drop(a.guard); // the old holder's lock going later changes nothing
    assert_eq!(owner_of(&b, "f").await.as_deref(), Some("w"));
}

#[tokio::test]
async fn progress_reports_holder_and_position() {
    let (_d, b) = store();
    let _a = b.acquire(&bound("p", "a"), &no_wait()).await.unwrap();
    let (wait, waiting) = support::waiting_forever();
    let first = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&req("p", "w1"), &wait).await.map(drop) })
    };
    waiting.await.expect("w1 never waited");
    let seen: Arc<Mutex<Vec<WaitInfo>>> = Arc::default();
    let wait = WaitOptions {
        progress: Some({
            let seen = seen.clone();
            Arc::new(move |i: &WaitInfo| seen.lock().unwrap().push(i.clone()))
        }),
        ..WaitOptions::until(Some(Instant::now() + Duration::from_millis(100)))
    };
    assert!(b.acquire(&req("p", "w2"), &wait).await.is_err());
    let seen = seen.lock().unwrap();
    let info = seen.first().expect("progress reported");
    assert_eq!(info.holder.as_ref().unwrap().owner, "a");
    assert_eq!(info.position, Some(2));
    assert_eq!(info.waiters, Some(2));
    first.abort();
}

#[tokio::test]
async fn odd_and_long_keys() {
    let (dir, b) = store();
    let long = "é".repeat(256);
    let mut keys: Vec<String> = ["a/b c", "..", ".", "100%", "x~y", "ключ"]
        .map(String::from)
        .to_vec();
    keys.push(long.clone());
    keys.push(format!("{}!", "/".repeat(400)));
    for k in &keys {
        b.acquire(&req(k, "o"), &no_wait()).await.unwrap();
    }
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        assert!(entry.file_type().unwrap().is_file());
        assert!(entry.file_name().len() < 255);
    }
    let mut sorted = keys.clone();
    sorted.sort();
    let all = b.status(&[]).await.unwrap();
    assert_eq!(all.into_iter().map(|s| s.key).collect::<Vec<_>>(), sorted);
    assert!(matches!(
        b.acquire(&req("", "o"), &no_wait()).await,
        Err(Error::Usage(_))
    ));
}

/// Damages `key`'s file with `damage`, and checks acquire and status refuse it with an
/// internal error naming the file, without rewriting it.
async fn assert_refused(b: &LocalBackend, key: &str, damage: impl FnOnce(&Path)) {
    let path = b.key_path(key);
    damage(&path);
    let before = std::fs::read(&path).unwrap();
    let e = refused(b.acquire(&req(key, "o"), &no_wait()).await);
    assert!(matches!(e, Error::Internal(_)), "{e}");
    assert_eq!(e.exit_code(), 70);
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    let e = b.status(&[key.to_string()]).await.unwrap_err();
    assert!(matches!(e, Error::Internal(_)), "{e}");
    assert!(
        b.status(&[]).await.is_err(),
        "status of all keys reads it too"
    );
    let listing = b.list().await.unwrap();
    assert_eq!(listing.unreadable.len(), 1, "listing names it and goes on");
    assert!(listing.unreadable[0]
        .to_string()
        .contains(&path.display().to_string()));
    assert_eq!(std::fs::read(&path).unwrap(), before, "left as it was");
}

#[tokio::test]
async fn damaged_files_are_refused_never_reset() {
    let (_d, b) = store();
    let mut last = 0;
    for _ in 0..3 {
        let a = b.acquire(&bound("k", "o"), &no_wait()).await.unwrap();
        last = a.lease.fencing_token;
        b.release("k", "o", ReleaseMode::All).await.unwrap();
    }
    let path = b.key_path("k");
    let good = std::fs::read(&path).unwrap();
    let restore = || std::fs::write(&path, &good).unwrap();

    assert_refused(&b, "k", |p| std::fs::write(p, b"").unwrap()).await;
    restore();
    assert_refused(&b, "k", |p| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(4096)
            .unwrap()
    })
    .await;
    restore();
    assert_refused(&b, "k", |p| {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.write_all_at(b"garbage", 30).unwrap();
        f.write_all_at(b"garbage", 4096 + 30).unwrap();
    })
    .await;
    restore();

    // One damaged slot is what a torn write looks like: the other copy is used, and the
    // counter jumps to its durable ceiling rather than risk repeating a token.
    // (Bound leases here: damaging the newest copy brings back the one before, whose
    // lease must not linger; a bound lease whose holder is gone is free.)
    for slot in [0u64, 1] {
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(b"XX", slot * 4096 + 40).unwrap();
        let a = b.acquire(&bound("k", "o"), &no_wait()).await.unwrap();
        assert!(a.lease.fencing_token > last, "token went back after damage");
        last = a.lease.fencing_token;
        b.release("k", "o", ReleaseMode::All).await.unwrap();
    }
}

#[tokio::test]
async fn links_and_odd_files_under_a_key_name_are_refused() {
    let (dir, b) = store();
    let target = dir.path().join("precious");
    std::fs::write(&target, b"do not touch").unwrap();
    std::os::unix::fs::symlink(&target, b.key_path("evil")).unwrap();
    let e = refused(b.acquire(&req("evil", "o"), &no_wait()).await);
    assert!(e.to_string().contains("evil.dlock"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), b"do not touch");
    std::fs::create_dir(b.key_path("dir")).unwrap();
    assert!(b.acquire(&req("dir", "o"), &no_wait()).await.is_err());
}

#[tokio::test]
async fn long_queues_are_counted_but_not_listed() {
    let (_d, b) = store();
    let _a = b.acquire(&bound("q", "a"), &no_wait()).await.unwrap();
    let cancel = CancellationToken::new();
    let mut tasks = Vec::new();
    for i in 0..140 {
        let (b, cancel) = (b.clone(), cancel.clone());
        tasks.push(tokio::spawn(async move {
            let wait = WaitOptions {
                cancel,
                ..WaitOptions::until(None)
            };
            b.acquire(&req("q", &format!("w{i}")), &wait)
                .await
                .map(drop)
        }));
    }
    let status = || async { b.status(&["q".into()]).await.unwrap().remove(0) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while status().await.waiters.is_some() {
        assert!(Instant::now() < deadline, "the list never overflowed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.cancel();
    for t in tasks {
        assert!(matches!(t.await.unwrap(), Err(Error::Cancelled(..))));
    }
    assert_eq!(
        status().await.waiters,
        Some(vec![]),
        "all gone, and it can tell"
    );
}

#[tokio::test]
async fn fair_arrivals_queue_behind_waiters_unfair_ones_may_not() {
    let (_d, b) = store();
    let a = b.acquire(&bound("u", "a"), &no_wait()).await.unwrap();
    let (wait, waiting) = support::waiting_forever();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&bound("u", "w"), &wait).await.unwrap() })
    };
    waiting.await.expect("the waiter never waited");
    // Free the lease while its holder keeps its lock: the waiter only notices at its next
    // recheck, so for a moment the key is free with a waiter queued.
    b.release("u", "x", ReleaseMode::Force).await.unwrap();
    let e = refused(b.acquire(&req("u", "fair"), &no_wait()).await);
    assert!(e.to_string().contains("queued waiter"), "{e}");
    let mut unfair = req("u", "unfair");
    unfair.fair = false;
    let got = b
        .acquire(&unfair, &no_wait())
        .await
        .expect("unfair may overtake");
    b.release("u", "unfair", ReleaseMode::All).await.unwrap();
    let w = waiter.await.unwrap();
    assert!(w.lease.fencing_token > got.lease.fencing_token);
    drop(a.guard);
}
#[tokio::test]
async fn dropping_a_waiting_acquire_leaves_nothing_queued() {
    let (_d, b) = store();
    let a = b.acquire(&bound("drop", "a"), &no_wait()).await.unwrap();
    for r in [bound("drop", "w"), req("drop", "w")] {
        let wait = forever();
        let attempt = tokio::time::timeout(Duration::from_millis(50), b.acquire(&r, &wait));
        assert!(attempt.await.is_err(), "still waiting when dropped");
        let st = b.status(&["drop".into()]).await.unwrap();
        assert_eq!(
            st[0].waiters,
            Some(vec![]),
            "the dropped waiter left the queue"
        );
    }
    b.release("drop", "a", ReleaseMode::All).await.unwrap();
    drop(a.guard);
    // Nobody is queued ahead: a fair newcomer gets it at once.
    b.acquire(&req("drop", "c"), &no_wait()).await.unwrap();
}
