//! User locks as a [`LockStore`]: one session per acquisition, waiting in `GET_LOCK`;
//! and `status` from `IS_USED_LOCK` and dlock's counter rows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use tokio::sync::Mutex;

use super::backend::{Held, Session, UserLockStore};
use crate::backend::session_lock::{self, SessionGuard};
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    sql, AcquireRequest, Acquired, Holder, KeyStatus, LastRuns, Lease, LockInfo, ReleaseMode,
    Released, RunRecord,
};
use crate::error::{Error, Result};

/// What one acquisition keeps between attempts.
pub struct UserLockWaiter {
    session: Option<Session>,
    /// A wait was cut short on the client's side: the session may still wait, or hold.
    busy: bool,
}

/// A counter row: (token, owner, connection id, holder JSON).
type Counter = (i64, String, u64, Option<String>);

impl UserLockStore {
    /// The session to try with, a fresh one in place of one left waiting.
    async fn ready<'w>(
        &self,
        req: &AcquireRequest,
        w: &'w mut UserLockWaiter,
    ) -> Result<&'w mut Session> {
        if w.busy {
            if let Some(s) = w.session.take() {
                self.cancel_wait(s.id).await;
            }
            w.busy = false;
        }
        if w.session.is_none() {
            w.session = Some(self.open_session(req.ttl).await?);
        }
        Ok(w.session.as_mut().expect("opened above"))
    }

    /// Keeps a granted session for the run, watched for its end.
    async fn keep(&self, req: &AcquireRequest, s: Session, token: u64, sent: Instant) -> Acquired {
        let session = Arc::new(Mutex::new(s));
        let watched = Arc::clone(&session);
        let guard: SessionGuard = session_lock::watch(move || {
            let s = Arc::clone(&watched);
            async move { s.lock().await.conn.ping().await.is_err() }
        });
        let held = Held {
            owner: req.owner.clone(),
            token,
            session,
        };
        self.held.lock().await.insert(req.key.clone(), held);
        Acquired {
            lease: Lease::timed(&req.key, &req.owner, token, req.ttl, false, sent),
            guard: Some(Box::new(guard)),
        }
    }

    /// Granted on `s`: bump the counter, keep the session.
    async fn granted(&self, req: &AcquireRequest, w: &mut UserLockWaiter) -> Result<Acquired> {
        let mut s = w.session.take().expect("granted on it");
        let (token, sent) = self.bump(&mut s, req).await?;
        Ok(self.keep(req, s, token, sent).await)
    }

    /// Who holds `key` (`IS_USED_LOCK`) and dlock's counter row of it.
    async fn holder_of(&self, key: &str) -> Result<Option<LockInfo>> {
        let sql = format!(
            "SELECT IS_USED_LOCK(?), c.token, c.owner, c.conn, c.holder FROM (SELECT 1) AS one \
             LEFT JOIN {} AS c ON c.name = ?",
            self.counters
        );
        type Row = (
            Option<u64>,
            Option<i64>,
            Option<String>,
            Option<u64>,
            Option<String>,
        );
        let rows: Vec<Row> = self
            .on_inner("cannot read the lock", sql, (key, key))
            .await?;
        let Some((Some(used), token, owner, conn, holder)) = rows.into_iter().next() else {
            return Ok(None);
        };
        let row = match (token, owner, conn) {
            (Some(t), Some(o), Some(c)) => Some((t, o, c, holder)),
            _ => None,
        };
        Ok(Some(info(key, used, row)))
    }

    /// The owner and token of the dlock session that holds `key`, if one does.
    async fn holding(&self, key: &str) -> Result<Option<(String, u64)>> {
        Ok(self
            .holder_of(key)
            .await?
            .filter(|i| i.fencing_token > 0)
            .map(|i| (i.owner, i.fencing_token)))
    }

    /// Every lock dlock's sessions hold (the server lists no user locks by itself).
    async fn held_by_dlock(&self) -> Result<Vec<KeyStatus>> {
        let sql = format!(
            "SELECT name FROM {} WHERE IS_USED_LOCK(name) = conn ORDER BY name",
            self.counters
        );
        let names: Vec<String> = self.on_inner("cannot read the locks", sql, ()).await?;
        self.statuses(&names).await
    }

    async fn statuses(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let mut out = Vec::new();
        for key in keys {
            self.check_name(key)?;
            out.push(KeyStatus::exclusive(key, self.holder_of(key).await?));
        }
        Ok(out)
    }

    async fn renew_held(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let found = {
            let held = self.held.lock().await;
            held.get(key)
                .filter(|h| h.owner == owner)
                .map(|h| (Arc::clone(&h.session), h.token))
        };
        let Some((session, token)) = found else {
            let sent = Instant::now();
            return match self.holding(key).await? {
                Some((o, token)) if o == owner => {
                    Ok(Lease::timed(key, owner, token, ttl, true, sent))
                }
                _ => Err(self.gone("renew", key)),
            };
        };
        let mut s = session.lock().await;
        match self.check(&mut s, key).await {
            Ok(Some(sent)) => Ok(Lease::timed(key, owner, token, ttl, false, sent)),
            Ok(None) => Err(self.gone("renew", key)),
            Err(e) if !e.is_retryable() => Err(self.gone("renew", key)),
            Err(e) => Err(e),
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
            let mut s = h.session.lock().await;
            let release = s.conn.exec_drop("DO RELEASE_LOCK(?)", (key,));
            // Dropping the session ends it, and the lock with it, even if this fails.
            let _ = self.inner.server.within("cannot release", release).await;
            return Ok(Released {
                previous_owner: Some(h.owner),
                still_held: false,
            });
        }
        let holder = self.holder_of(key).await?;
        match holder {
            Some(i) if mode == ReleaseMode::Force => {
                let id = i.holder.pid;
                let _ = self.on_inner::<u8, _>("cannot end the holder's session", format!("KILL {id}"), ()).await;
                Ok(Released { previous_owner: Some(i.owner), still_held: false })
            }
            Some(i) if i.owner == owner && mode == ReleaseMode::One => {
                Ok(Released { previous_owner: Some(i.owner), still_held: true })
            }
            Some(i) if i.owner == owner => Err(Error::NotOwner(format!(
                "cannot release lock '{key}' on {}: it is held by the session of another process, which alone can release it",
                self.name()
            ))),
            Some(_) => Err(Error::held_by_other("release", key, &self.name(), owner)),
            None if mode == ReleaseMode::Force => Ok(Released { previous_owner: None, still_held: false }),
            None => Err(self.gone("release", key)),
        }
    }
}

/// The holder of `key`, session `used`: dlock's when its counter row names that session.
fn info(key: &str, used: u64, row: Option<Counter>) -> LockInfo {
    match row.filter(|r| r.2 == used) {
        Some((token, owner, _, holder)) => LockInfo {
            key: key.to_string(),
            owner,
            fencing_token: token.max(0) as u64,
            holder: sql::holder_of(holder.as_deref()),
            ttl_left_ms: None,
            depth: 1,
        },
        None => LockInfo {
            key: key.to_string(),
            owner: format!("foreign (MySQL connection {used})"),
            fencing_token: 0,
            holder: Holder {
                pid: used.min(u32::MAX as u64) as u32,
                ..Holder::default()
            },
            ttl_left_ms: None,
            depth: 1,
        },
    }
}

#[async_trait]
impl LockStore for UserLockStore {
    type Waiter = UserLockWaiter;

    fn describe(&self) -> String {
        self.name()
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<UserLockWaiter> {
        session_lock::refuse(req, &self.name(), "a GET_LOCK lock")?;
        self.check_name(&req.key)?;
        Ok(UserLockWaiter {
            session: None,
            busy: false,
        })
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut UserLockWaiter,
        _enqueue: bool,
    ) -> Result<Attempt> {
        if !req.reenter.is_empty() {
            if let Some((owner, token)) = self.holding(&req.key).await? {
                if req.reenter.contains(&owner) {
                    let lease = Lease::timed(&req.key, owner, token, req.ttl, true, Instant::now());
                    return Ok(Attempt::Granted(Acquired { lease, guard: None }));
                }
            }
        }
        let s = self.ready(req, w).await?;
        if self.get_lock(s, &req.key, Duration::ZERO).await? {
            return Ok(Attempt::Granted(self.granted(req, w).await?));
        }
        let holder = self.holder_of(&req.key).await.ok().flatten();
        Ok(Attempt::Busy(Busy {
            holder,
            ..Busy::default()
        }))
    }

    /// Waits in `GET_LOCK` for the pause, in whole seconds (the server's unit), less than
    /// the pause when it is shorter than one, which the loop then ends.
    async fn sleep(
        &self,
        req: &AcquireRequest,
        w: &mut UserLockWaiter,
        _busy: &Busy,
        pause: Duration,
        _round: u32,
    ) -> Result<Woken> {
        let Some(s) = w.session.as_mut() else {
            return Ok(Woken::Again);
        };
        let wait = Duration::from_secs(pause.as_secs().max(1));
        w.busy = true;
        let got = self.get_lock(s, &req.key, wait).await;
        w.busy = false;
        match got? {
            true => {
                let acquired = self.granted(req, w).await?;
                Ok(Woken::Answered(Box::new(Attempt::Granted(acquired))))
            }
            false => Ok(Woken::Again),
        }
    }

    async fn leave(&self, _req: &AcquireRequest, w: UserLockWaiter) {
        if let (Some(s), true) = (&w.session, w.busy) {
            self.cancel_wait(s.id).await;
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
        match keys.is_empty() {
            true => self.held_by_dlock().await,
            false => self.statuses(keys).await,
        }
    }

    /// A waiter sleeps in `GET_LOCK`; going back to it (and to its end) is rare.
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
