//! Memcached as a [`LockStore`]: no queue and no notifications, so waiters poll with the
//! seam's jittered back-off, and a freed lock goes to whichever waiter looks first. The
//! back-off is bounded by twice the hold time the waiter observed
//! ([`backoff_within`]): with short holds every waiter keeps looking often, so none
//! sleeps through several free periods while the others take turns.

use std::time::Duration;

use async_trait::async_trait;

use super::client::{Client, Reply, Request, Tuning};
use super::keys::Keys;
use super::url::Target;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::waiting::Holds;
use crate::backend::{
    AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord, Sharing,
};
use crate::error::{Error, Result};

/// One memcached server.
pub struct MemcachedStore {
    pub(super) client: Client,
    pub(super) name: String,
}

/// One acquisition: whether an attempt may have taken the key without our hearing of it,
/// and the holds it saw.
#[derive(Default)]
pub struct MemcachedWaiter {
    pub(super) in_flight: bool,
    pub(super) holds: Holds,
}

impl MemcachedStore {
    /// A store on the server a `memcached://` URL names; connects on first use.
    pub fn open(t: &Target, tuning: Tuning) -> MemcachedStore {
        MemcachedStore {
            client: Client::new(&t.addr, &t.name, tuning),
            name: t.name.clone(),
        }
    }

    /// The items of lock `key`.
    pub(super) fn keys(&self, key: &str) -> Result<Keys> {
        Keys::of(key, &self.name)
    }

    /// One call about lock `key`.
    pub(super) async fn call(&self, key: &str, requests: &[Request]) -> Result<Vec<Reply>> {
        self.client.call(&format!("lock '{key}'"), requests).await
    }

    /// A reply that the protocol does not allow here.
    pub(super) fn unexpected(&self, key: &str, reply: &Reply) -> Error {
        self.client.unavailable(
            &format!("lock '{key}'"),
            &format!("unexpected reply {reply:?}"),
        )
    }
}

#[async_trait]
impl LockStore for MemcachedStore {
    type Waiter = MemcachedWaiter;

    fn describe(&self) -> String {
        self.name.clone()
    }

    /// Every sharing: shared and semaphore holders are kept as one group (`shared.rs`).
    fn supports(&self, _sharing: Sharing) -> bool {
        true
    }

    fn queue_order(&self) -> Option<&'static str> {
        Some(crate::backend::ORDER_NONE)
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<MemcachedWaiter> {
        self.keys(&req.key)?;
        super::ttl::seconds(req.ttl, &req.key, &self.name)?;
        Ok(MemcachedWaiter::default())
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut MemcachedWaiter,
        _enqueue: bool,
    ) -> Result<Attempt> {
        w.in_flight = true;
        let attempt = self.attempt_once(req).await;
        w.in_flight = false;
        attempt
    }

    async fn sleep(
        &self,
        _req: &AcquireRequest,
        w: &mut MemcachedWaiter,
        busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        Ok(w.holds.nap(busy, round, pause).await)
    }

    async fn leave(&self, req: &AcquireRequest, w: MemcachedWaiter) {
        if w.in_flight {
            self.give_back(req).await;
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_lease(key, owner, ttl).await
    }

    /// An item may expire a second early and lives three seconds at least: the hold is
    /// rounded up to whole seconds, plus that second, so that it lasts at least `left`.
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let lease = &acquired.lease;
        let ttl = (left + super::ttl::EARLY).max(super::ttl::MIN_TTL);
        let until = crate::backend::now_ms() + ttl.as_millis() as u64;
        self.renew_marked(&lease.key, &lease.owner, ttl, Some(until))
            .await
            .map(drop)
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        self.release_lease(key, owner, mode).await
    }

    /// The server is connected on the first request: connect now.
    async fn ready(&self, key: &str) -> Result<()> {
        self.client.ready(&format!("lock '{key}'")).await
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        self.read_status(keys).await
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        self.keep_run(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        self.read_runs(key).await
    }
}
