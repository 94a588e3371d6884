//! Requests and wait options for tests that call the library directly.

use std::time::{Duration, Instant};

use dlock::backend::{AcquireRequest, Acquired, Backend, Holder, ReleaseMode, WaitOptions};
use dlock::error::Error;

/// Wait options that wait forever, and a receiver that fires once the waiter has been
/// refused and is waiting: every backend reports progress after its first refused attempt
/// (by then queued, where the backend keeps a queue). Tests await it instead of sleeping.
/// The receiver fails if the acquisition ended without ever waiting.
pub fn waiting_forever() -> (
    dlock::backend::WaitOptions,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let told = move |_: &dlock::backend::WaitInfo| {
        if let Some(tx) = tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
    };
    let wait = dlock::backend::WaitOptions {
        progress: Some(std::sync::Arc::new(told)),
        ..dlock::backend::WaitOptions::until(None)
    };
    (wait, rx)
}

/// A request for `key` by `owner` as `lock` makes it: detached, fair, with a 10 s lease,
/// held by this process on "testhost", running "test OWNER".
pub fn req(key: &str, owner: &str) -> AcquireRequest {
    req_ttl(key, owner, Duration::from_secs(10))
}

/// [`req`] with a lease of `ttl`.
pub fn req_ttl(key: &str, owner: &str, ttl: Duration) -> AcquireRequest {
    AcquireRequest {
        key: key.into(),
        owner: owner.into(),
        reenter: Vec::new(),
        ttl,
        holder: Holder {
            host: "testhost".into(),
            pid: std::process::id(),
            user: "tester".into(),
            command: format!("test {owner}"),
            acquired_at_ms: 0,
            ..Holder::default()
        },
        detached: true,
        fair: true,
        sharing: Default::default(),
        queue: Default::default(),
    }
}

/// [`req`] as `exec` makes it: bound to this process where the backend supports it.
pub fn bound(key: &str, owner: &str) -> AcquireRequest {
    AcquireRequest {
        detached: false,
        ..req(key, owner)
    }
}

/// Waits as long as it takes.
pub fn forever() -> WaitOptions {
    WaitOptions::until(None)
}

/// Does not wait: one attempt (`--no-wait`).
pub fn no_wait() -> WaitOptions {
    WaitOptions::until(Some(Instant::now()))
}

/// Waits up to `d` from now (`--timeout`).
pub fn within(d: Duration) -> WaitOptions {
    WaitOptions::until(Some(Instant::now() + d))
}

/// The error of an acquisition that must fail (`Acquired` is not `Debug`).
pub fn refused(result: Result<Acquired, Error>) -> Error {
    match result {
        Ok(got) => panic!("unexpectedly acquired: {:?}", got.lease),
        Err(e) => e,
    }
}

/// The order in which `n` waiters of `key` are served once `first` lets it go: each grant
/// comes on `granted` as (the waiter's index, its owner), within 5 s of the one before, and
/// is released at once so that the next may come.
pub async fn served_order<B: Backend + ?Sized>(
    b: &B,
    key: &str,
    first: &str,
    granted: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, String)>,
    n: usize,
) -> Vec<usize> {
    b.release(key, first, ReleaseMode::All).await.unwrap();
    let mut order = Vec::with_capacity(n);
    for _ in 0..n {
        let (i, owner) = tokio::time::timeout(Duration::from_secs(5), granted.recv())
            .await
            .expect("the next waiter got the lock")
            .unwrap();
        order.push(i);
        b.release(key, &owner, ReleaseMode::All).await.unwrap();
    }
    order
}
