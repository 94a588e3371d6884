//! The statements of a session that holds, or waits for, one user lock, its server-side
//! limits set no shorter than the lease's TTL.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use super::backend::{Session, UserLockStore};
use crate::backend::session_lock::Bound;
use crate::backend::{sql, AcquireRequest};
use crate::error::Result;

impl UserLockStore {
    /// Opens a session whose idle and network timeouts are at least `ttl`: the server
    /// ends a silent session (and releases its locks) no sooner. TCP keepalive is the
    /// server host's (`net.ipv4.tcp_keepalive_*`, two hours by default).
    pub(super) async fn open_session(&self, ttl: Duration) -> Result<Session> {
        let secs = Bound::for_ttl(ttl).secs;
        let mut conn = self.inner.server.open().await?;
        let setup = format!(
            "SET SESSION wait_timeout = GREATEST(@@wait_timeout, {secs}), \
             net_read_timeout = GREATEST(@@net_read_timeout, {secs}), \
             net_write_timeout = GREATEST(@@net_write_timeout, {secs})"
        );
        let ready = async {
            conn.query_drop(setup).await?;
            conn.query_first::<u64, _>("SELECT CONNECTION_ID()").await
        };
        let id = self
            .inner
            .server
            .within("cannot set up a lock session", ready)
            .await?
            .unwrap_or(0);
        Ok(Session { conn, id })
    }

    /// `GET_LOCK(KEY, wait)`: true when granted. `wait` zero tries once.
    pub(super) async fn get_lock(
        &self,
        s: &mut Session,
        key: &str,
        wait: Duration,
    ) -> Result<bool> {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let got = s
            .conn
            .exec_first::<Option<i64>, _, _>("SELECT GET_LOCK(?, ?)", (key, secs));
        let got = match secs {
            0 => self.inner.server.within("cannot try the lock", got).await?,
            _ => got.await.map_err(|e| {
                self.inner
                    .server
                    .unavailable("cannot wait for the lock", &e)
            })?,
        };
        Ok(got.flatten() == Some(1))
    }

    /// Bumps the counter of `key` for `req` (the session holds the lock): the new token,
    /// and when the request was sent. Releases the lock when it cannot.
    pub(super) async fn bump(
        &self,
        s: &mut Session,
        req: &AcquireRequest,
    ) -> Result<(u64, Instant)> {
        let sent = Instant::now();
        let holder = sql::holder_json(&req.holder);
        let upsert = format!(
            "INSERT INTO {t} (name, token, owner, conn, holder) VALUES (?, 1, ?, CONNECTION_ID(), ?) \
             ON DUPLICATE KEY UPDATE token = token + 1, owner = VALUES(owner), \
             conn = VALUES(conn), holder = VALUES(holder)",
            t = self.counters
        );
        let read = format!("SELECT token FROM {} WHERE name = ?", self.counters);
        let key = req.key.as_str();
        let bumped = async {
            s.conn.exec_drop(upsert, (key, &req.owner, &holder)).await?;
            s.conn.exec_first::<i64, _, _>(read, (key,)).await
        };
        match self
            .inner
            .server
            .within("cannot bump the fencing counter", bumped)
            .await
        {
            Ok(token) => Ok((token.unwrap_or(0).max(0) as u64, sent)),
            Err(e) => {
                let _ = s.conn.exec_drop("DO RELEASE_LOCK(?)", (key,)).await;
                Err(e)
            }
        }
    }

    /// The holder's check: `IS_USED_LOCK(KEY)` is this session.
    pub(super) async fn check(&self, s: &mut Session, key: &str) -> Result<Option<Instant>> {
        let sent = Instant::now();
        let asked = s
            .conn
            .exec_first::<Option<u64>, _, _>("SELECT IS_USED_LOCK(?)", (key,));
        let used = self
            .inner
            .server
            .within("cannot check the session", asked)
            .await?;
        Ok((used.flatten() == Some(s.id)).then_some(sent))
    }

    /// Ends a session's wait on the server (`KILL QUERY`) from the table store's
    /// connection; the session is dropped after this, which releases a raced grant.
    pub(super) async fn cancel_wait(&self, id: u64) {
        let _ = self
            .on_inner::<u8, _>("cannot cancel a wait", format!("KILL QUERY {id}"), ())
            .await;
    }
}
