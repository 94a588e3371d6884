//! An in-memory [`LockStore`]: the reference implementation of the store seam, small enough
//! to read at once. It keeps leases on tokio's clock, so the waiting loop can be tested with
//! the clock paused, and it has switches that let tests put a fault at any phase of a wait.
//!
//! It lives as long as the process: it is for tests, never a real store.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use super::store::{Attempt, Busy, LockStore};
use super::{
    now_ms, AcquireRequest, Acquired, Holder, KeyStatus, LastRuns, Lease, LockInfo, ReleaseMode,
    Released, RunRecord, WaiterInfo,
};
use crate::error::{Error, Result};

/// Locks kept in this process's memory.
pub struct MemoryStore {
    name: String,
    keys: Mutex<HashMap<String, KeyState>>,
    /// Bumped after every change: waiters sleep on it.
    changed: watch::Sender<u64>,
    /// Test switch: attempts hang until it is turned off again.
    stalled: AtomicBool,
    /// Test hooks run after each refused or granted attempt, before it returns.
    on_refused: Hook,
    on_granted: Hook,
}

type Hook = Mutex<Option<Box<dyn Fn() + Send + Sync>>>;

fn run_hook(hook: &Hook) {
    if let Some(hook) = &*hook.lock().unwrap_or_else(PoisonError::into_inner) {
        hook();
    }
}

#[derive(Default)]
struct KeyState {
    lease: Option<Held>,
    queue: VecDeque<(String, Holder)>,
    counter: u64,
    /// Kept for the life of the store (a test's), so no expiry.
    runs: LastRuns,
}

#[derive(Clone)]
struct Held {
    owner: String,
    token: u64,
    depth: u32,
    expires: Instant,
    holder: Holder,
}

/// One acquisition's place in line.
pub struct MemoryWaiter {
    id: String,
    seen: watch::Receiver<u64>,
}

/// The stores opened by name (`memory://NAME`), shared within this process.
static NAMED: LazyLock<Mutex<HashMap<String, Arc<MemoryStore>>>> = LazyLock::new(Default::default);

impl MemoryStore {
    /// The store called `name` in this process, created empty on first use.
    pub fn named(name: &str) -> Arc<MemoryStore> {
        let mut named = NAMED.lock().unwrap_or_else(PoisonError::into_inner);
        let store = named.entry(name.to_string());
        store
            .or_insert_with(|| Arc::new(MemoryStore::new(name)))
            .clone()
    }

    /// An empty store, described as `memory://NAME`.
    pub fn new(name: &str) -> MemoryStore {
        MemoryStore {
            name: format!("memory://{name}"),
            keys: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            stalled: AtomicBool::new(false),
            on_refused: Mutex::new(None),
            on_granted: Mutex::new(None),
        }
    }

    /// Makes every attempt hang (true) until turned off.
    pub fn stall(&self, on: bool) {
        self.stalled.store(on, Ordering::SeqCst);
        self.poke();
    }

    /// Runs `hook` after each refused attempt, before the waiter sleeps.
    pub fn on_refused(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self
            .on_refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(hook));
    }

    /// Runs `hook` after each granted attempt, before the grant is returned.
    pub fn on_granted(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self
            .on_granted
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(hook));
    }

    /// Wakes every sleeper without changing anything (a spurious wake-up).
    pub fn poke(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn keys(&self) -> MutexGuard<'_, HashMap<String, KeyState>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lease(&self, key: &str, h: &Held, ttl: Duration, reentered: bool) -> Lease {
        let sent_at = std::time::Instant::now();
        let lease = Lease::timed(key, &h.owner, h.token, ttl, reentered, sent_at);
        lease.expiring_in(h.expires.saturating_duration_since(Instant::now()))
    }

    fn not_owner(&self, verb: &str, key: &str, owner: &str, held: Option<&Held>) -> Error {
        match held {
            Some(_) => Error::held_by_other(verb, key, &self.name, owner),
            None => Error::lease_gone(verb, key, &self.name),
        }
    }
}

impl KeyState {
    /// The lease, unless it has expired (then it is dropped).
    fn live(&mut self) -> Option<&mut Held> {
        if self
            .lease
            .as_ref()
            .is_some_and(|l| l.expires <= Instant::now())
        {
            self.lease = None;
        }
        self.lease.as_mut()
    }

    fn info(&self, key: &str) -> Option<LockInfo> {
        self.lease.as_ref().map(|l| LockInfo {
            key: key.to_string(),
            owner: l.owner.clone(),
            fencing_token: l.token,
            holder: l.holder.clone(),
            ttl_left_ms: Some(
                l.expires
                    .saturating_duration_since(Instant::now())
                    .as_millis() as u64,
            ),
            depth: l.depth,
        })
    }

    fn status(&mut self, key: &str) -> KeyStatus {
        self.live();
        let waiters = self.queue.iter().map(|(id, holder)| WaiterInfo {
            id: id.clone(),
            holder: holder.clone(),
            sharing: crate::backend::Sharing::Exclusive,
            priority: 0,
        });
        KeyStatus::exclusive(key, self.info(key)).with_waiters(waiters.collect())
    }
}

#[async_trait]
impl LockStore for MemoryStore {
    type Waiter = MemoryWaiter;

    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn begin(&self, _req: &AcquireRequest) -> Result<MemoryWaiter> {
        Ok(MemoryWaiter {
            id: crate::ids::new_owner_id(),
            seen: self.changed.subscribe(),
        })
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut MemoryWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        while self.stalled.load(Ordering::SeqCst) {
            let mut changes = self.changed.subscribe();
            let _ = changes.changed().await;
        }
        // Marked seen before the state is read: a change after the read wakes the sleep.
        w.seen.borrow_and_update();
        let attempt = self.try_take(req, w, enqueue);
        match attempt {
            Attempt::Busy(_) => run_hook(&self.on_refused),
            Attempt::Granted(_) => run_hook(&self.on_granted),
        }
        Ok(attempt)
    }

    async fn sleep(
        &self,
        _req: &AcquireRequest,
        w: &mut MemoryWaiter,
        _busy: &Busy,
        pause: Duration,
        _round: u32,
    ) -> Result<super::store::Woken> {
        let _ = tokio::time::timeout(pause, w.seen.changed()).await;
        Ok(super::store::Woken::Again)
    }

    async fn leave(&self, _req: &AcquireRequest, w: MemoryWaiter) {
        for state in self.keys().values_mut() {
            state.queue.retain(|(id, _)| *id != w.id);
        }
        self.poke();
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let mut keys = self.keys();
        let held = keys.get_mut(key).and_then(KeyState::live);
        match held {
            Some(l) if l.owner == owner => {
                l.expires = l.expires.max(Instant::now() + ttl);
                let l = l.clone();
                Ok(self.lease(key, &l, ttl, false))
            }
            other => Err(self.not_owner("renew", key, owner, other.as_deref())),
        }
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let released = {
            let mut keys = self.keys();
            let state = keys.entry(key.to_string()).or_default();
            match state.live() {
                None if mode == ReleaseMode::Force => Released {
                    previous_owner: None,
                    still_held: false,
                },
                Some(l) if mode == ReleaseMode::Force || l.owner == owner => {
                    let previous_owner = Some(l.owner.clone());
                    let still_held = mode == ReleaseMode::One && l.depth > 1;
                    if still_held {
                        l.depth -= 1;
                    } else {
                        state.lease = None;
                    }
                    Released {
                        previous_owner,
                        still_held,
                    }
                }
                other => return Err(self.not_owner("release", key, owner, other.as_deref())),
            }
        };
        self.poke();
        Ok(released)
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let mut all = self.keys();
        if keys.is_empty() {
            let mut held: Vec<KeyStatus> = all
                .iter_mut()
                .map(|(k, s)| s.status(k))
                .filter(|s| s.lock.is_some())
                .collect();
            held.sort_by(|a, b| a.key.cmp(&b.key));
            return Ok(held);
        }
        Ok(keys
            .iter()
            .map(|k| all.entry(k.clone()).or_default().status(k))
            .collect())
    }

    /// The lease expires exactly `left` from now (a renewal never shortens it).
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let (key, owner) = (&acquired.lease.key, &acquired.lease.owner);
        {
            let mut keys = self.keys();
            let held = keys.get_mut(key.as_str()).and_then(KeyState::live);
            match held {
                Some(l) if l.owner == *owner => {
                    l.expires = Instant::now() + left;
                    l.holder.held_until_ms = Some(now_ms() + left.as_millis() as u64);
                }
                other => return Err(self.not_owner("hold", key, owner, other.as_deref())),
            }
        }
        self.poke();
        Ok(())
    }

    /// Sleeps on the change counter, subscribed before the keys are looked at.
    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        let mut changes = self.changed.subscribe();
        let free = {
            let mut all = self.keys();
            keys.iter()
                .any(|k| all.get_mut(k.as_str()).and_then(KeyState::live).is_none())
        };
        if !free {
            let _ = tokio::time::timeout(pause, changes.changed()).await;
        }
        Ok(())
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        {
            let mut keys = self.keys();
            let state = keys.entry(key.to_string()).or_default();
            state.runs = std::mem::take(&mut state.runs).with(run);
        }
        self.poke();
        Ok(())
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        Ok(self
            .keys()
            .get(key)
            .map(|s| s.runs.clone())
            .unwrap_or_default())
    }
}

impl MemoryStore {
    /// One attempt under the state lock: re-enter, take, or be refused (and queue).
    fn try_take(&self, req: &AcquireRequest, w: &MemoryWaiter, enqueue: bool) -> Attempt {
        let mut keys = self.keys();
        let state = keys.entry(req.key.clone()).or_default();
        let now = Instant::now();
        if let Some(l) = state.live() {
            if req.reenter.contains(&l.owner) {
                l.depth += 1;
                l.expires = l.expires.max(now + req.ttl);
                let l = l.clone();
                state.queue.retain(|(id, _)| *id != w.id);
                return Attempt::Granted(Acquired {
                    lease: self.lease(&req.key, &l, req.ttl, true),
                    guard: None,
                });
            }
        }
        let first = state.queue.front().is_none_or(|(id, _)| *id == w.id);
        if state.lease.is_none() && (first || !req.fair) {
            state.counter += 1;
            let l = Held {
                owner: req.owner.clone(),
                token: state.counter,
                depth: 1,
                expires: now + req.ttl,
                holder: Holder {
                    acquired_at_ms: now_ms(),
                    ..req.holder.clone()
                },
            };
            state.lease = Some(l.clone());
            state.queue.retain(|(id, _)| *id != w.id);
            let lease = self.lease(&req.key, &l, req.ttl, false);
            drop(keys);
            self.poke();
            return Attempt::Granted(Acquired { lease, guard: None });
        }
        let mut position = state.queue.iter().position(|(id, _)| *id == w.id);
        if position.is_none() && enqueue {
            let holder = Holder {
                acquired_at_ms: now_ms(),
                ..req.holder.clone()
            };
            state.queue.push_back((w.id.clone(), holder));
            position = Some(state.queue.len() - 1);
        }
        Attempt::Busy(Busy {
            holder: state.info(&req.key),
            position: position.map(|p| p as u64 + 1),
            waiters: Some(state.queue.len() as u64),
            retry: state
                .lease
                .as_ref()
                .map(|l| l.expires.saturating_duration_since(now)),
        })
    }
}
