//! Advisory locks as a [`LockStore`]: the waiting loop drives one session per acquisition;
//! a waiter sleeps in the server's own lock queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::backend::{AdvisoryStore, Held, Session};
use super::lock_id::LockId;
use super::session::Took;
use crate::backend::session_lock::{self, SessionGuard};
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
};
use crate::error::{Error, Result};

/// What one acquisition keeps between attempts.
pub struct AdvisoryWaiter {
    lock: Option<LockId>,
    session: Option<Session>,
    /// A wait was cut short on the server's side (the sleep was dropped): the session is
    /// still in the server's queue, or may even have been granted.
    busy: bool,
}

impl AdvisoryStore {
    /// The session to try with: a new one, or a fresh one in place of one that broke or
    /// was left waiting.
    async fn ready<'w>(
        &self,
        req: &AcquireRequest,
        w: &'w mut AdvisoryWaiter,
        lock: LockId,
    ) -> Result<&'w Session> {
        let stale = w.session.as_ref().is_some_and(|s| s.client.is_closed());
        if w.busy || stale {
            if let Some(s) = w.session.take() {
                self.cancel_wait(&s).await;
            }
            w.busy = false;
        }
        if w.session.is_none() {
            w.session = Some(self.open_session(lock, req.ttl).await?);
        }
        Ok(w.session.as_ref().expect("opened above"))
    }

    /// Keeps a granted session for the run and hands out its lease, with the watch that
    /// tells `exec` when the session ends.
    async fn keep(&self, req: &AcquireRequest, s: Session, token: u64, sent: Instant) -> Acquired {
        let session = Arc::new(s);
        let watched = Arc::clone(&session);
        let guard: SessionGuard = session_lock::watch(move || {
            let closed = watched.client.is_closed();
            async move { closed }
        });
        let held = Held {
            owner: req.owner.clone(),
            token,
            session,
        };
        self.held.lock().await.insert(req.key.clone(), held);
        let lease = Lease::timed(&req.key, &req.owner, token, req.ttl, false, sent);
        Acquired {
            lease,
            guard: Some(Box::new(guard)),
        }
    }

    /// Who blocks us, for the waiting line.
    async fn blocker(&self, key: &str) -> Busy {
        let holder = match self.read_status(&[key.to_string()]).await {
            Ok(mut st) => st.pop().and_then(|s| s.lock),
            Err(_) => None,
        };
        Busy {
            holder,
            ..Busy::default()
        }
    }

    /// A re-entry by a process under the holder (a nested `dlock exec` in CMD): the lock is
    /// held by a session whose row names one of `req.reenter`.
    async fn reentered(&self, req: &AcquireRequest, lock: LockId) -> Result<Option<Acquired>> {
        if req.reenter.is_empty() {
            return Ok(None);
        }
        let sent = Instant::now();
        Ok(self.holding(lock).await?.and_then(|(owner, token)| {
            req.reenter.contains(&owner).then(|| Acquired {
                lease: Lease::timed(&req.key, owner, token, req.ttl, true, sent),
                guard: None,
            })
        }))
    }

    async fn renew_held(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let (session, token) = {
            let held = self.held.lock().await;
            match held.get(key) {
                Some(h) if h.owner == owner => (Arc::clone(&h.session), h.token),
                Some(_) | None => {
                    drop(held);
                    return self.renew_elsewhere(key, owner, ttl).await;
                }
            }
        };
        match self.check(&session).await {
            Ok(sent) => Ok(Lease::timed(key, owner, token, ttl, false, sent)),
            Err(_) if session.client.is_closed() => Err(self.gone("renew", key)),
            Err(e) => Err(e),
        }
    }

    /// The renewal of a lease re-entered here and held by a session of another process.
    async fn renew_elsewhere(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let sent = Instant::now();
        let lock = self.lock_of(key).await?;
        match self.holding(lock).await? {
            Some((o, token)) if o == owner => Ok(Lease::timed(key, owner, token, ttl, true, sent)),
            _ => Err(self.gone("renew", key)),
        }
    }

    async fn release_held(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let mine = {
            let mut held = self.held.lock().await;
            match held.get(key) {
                Some(h) if h.owner == owner || mode == ReleaseMode::Force => held.remove(key),
                _ => None,
            }
        };
        if let Some(h) = mine {
            // Dropping the session ends it, and the lock with it, even if this fails.
            let _ = self.unlock(&h.session).await;
            return Ok(Released {
                previous_owner: Some(h.owner),
                still_held: false,
            });
        }
        let lock = self.lock_of(key).await?;
        if mode == ReleaseMode::Force {
            return self.terminate_holder(key, lock).await;
        }
        match self.holding(lock).await? {
            // One level of a re-entered lease: the holder's session keeps it.
            Some((o, _)) if o == owner && mode == ReleaseMode::One => Ok(Released {
                previous_owner: Some(o),
                still_held: true,
            }),
            Some((o, _)) if o == owner => Err(Error::NotOwner(format!(
                "cannot release lock '{key}' on {}: it is held by the session of another \
                 process, which alone can release it",
                self.name()
            ))),
            Some(_) => Err(Error::held_by_other("release", key, &self.name(), owner)),
            None => Err(self.gone("release", key)),
        }
    }
}

#[async_trait]
impl LockStore for AdvisoryStore {
    type Waiter = AdvisoryWaiter;

    fn describe(&self) -> String {
        self.name()
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<AdvisoryWaiter> {
        session_lock::refuse(req, &self.name(), "a PostgreSQL advisory lock")?;
        Ok(AdvisoryWaiter {
            lock: None,
            session: None,
            busy: false,
        })
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut AdvisoryWaiter,
        _enqueue: bool,
    ) -> Result<Attempt> {
        let lock = match w.lock {
            Some(lock) => lock,
            None => *w.lock.insert(self.lock_of(&req.key).await?),
        };
        if let Some(acquired) = self.reentered(req, lock).await? {
            return Ok(Attempt::Granted(acquired));
        }
        let session = self.ready(req, w, lock).await?;
        match self.try_lock(session, req).await? {
            Took::Granted(token, sent) => {
                let s = w.session.take().expect("tried on it");
                Ok(Attempt::Granted(self.keep(req, s, token, sent).await))
            }
            Took::Refused => Ok(Attempt::Busy(self.blocker(&req.key).await)),
        }
    }

    /// Waits in the server's queue for the whole pause, a little less so that its answer
    /// comes before the loop's deadline.
    async fn sleep(
        &self,
        req: &AcquireRequest,
        w: &mut AdvisoryWaiter,
        _busy: &Busy,
        pause: Duration,
        _round: u32,
    ) -> Result<Woken> {
        let Some(session) = w.session.as_ref() else {
            return Ok(Woken::Again);
        };
        let margin = Duration::from_millis(10);
        let pause = if pause > margin * 5 {
            pause - margin
        } else {
            pause
        };
        w.busy = true;
        let took = self.wait_lock(session, req, pause).await;
        w.busy = false;
        match took? {
            Took::Granted(token, sent) => {
                let s = w.session.take().expect("waited on it");
                let acquired = self.keep(req, s, token, sent).await;
                Ok(Woken::Answered(Box::new(Attempt::Granted(acquired))))
            }
            Took::Refused => Ok(Woken::Again),
        }
    }

    async fn leave(&self, _req: &AcquireRequest, w: AdvisoryWaiter) {
        if let Some(s) = w.session {
            if w.busy {
                self.cancel_wait(&s).await;
            }
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_held(key, owner, ttl)
            .await
            .map_err(|e| self.inner.server.naming(key, e))
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        self.release_held(key, owner, mode)
            .await
            .map_err(|e| self.inner.server.naming(key, e))
    }

    /// The lock cannot outlive the session: `exec --hold-at-least` keeps it until then.
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        crate::backend::session_lock::linger(self, acquired, left).await
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        self.read_status(keys).await
    }

    /// A waiter sleeps in the server's queue; going back to it (and to its end) is rare.
    fn heartbeat(&self) -> Duration {
        Duration::from_secs(3600)
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        LockStore::record_run(&self.inner, key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        LockStore::last_runs(&self.inner, key).await
    }
}
