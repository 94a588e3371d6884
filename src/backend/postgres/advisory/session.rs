//! The statements of a session that holds, or waits for, one advisory lock: opened with
//! the server-side bounds of [`Bound`], it tries, blocks in the server's lock queue, bumps
//! the lock's counter row, answers the holder's checks, and unlocks.

use std::time::{Duration, Instant};

use tokio_postgres::SimpleQueryMessage;

use super::backend::{AdvisoryStore, Session};
use super::lock_id::LockId;
use crate::backend::session_lock::Bound;
use crate::backend::{sql, AcquireRequest};
use crate::error::Result;

/// What one try or wait found.
pub enum Took {
    /// Granted, with the new fencing token and when the request that the server answered
    /// after the grant was sent (what the session's bound counts from).
    Granted(u64, Instant),
    /// Held by another session.
    Refused,
}

/// The settings that keep the server from ending the session sooner than the lease's TTL
/// after the last thing it heard from us, and from ending a long wait: every one the
/// server knows (older servers lack some; what they lack they cannot fire either).
fn settings(b: Bound) -> String {
    let values = [
        ("lock_timeout", "0".to_string()),
        ("statement_timeout", "0".to_string()),
        ("idle_in_transaction_session_timeout", "0".to_string()),
        ("idle_session_timeout", "0".to_string()),
        ("tcp_keepalives_idle", b.idle.to_string()),
        ("tcp_keepalives_interval", b.interval.to_string()),
        ("tcp_keepalives_count", b.count.to_string()),
        ("tcp_user_timeout", (b.secs * 1000).to_string()),
        ("application_name", "dlock advisory".to_string()),
    ];
    let rows: Vec<String> = values
        .iter()
        .map(|(n, v)| format!("('{n}', '{v}')"))
        .collect();
    format!(
        "SELECT set_config(name, value, false) FROM (VALUES {}) AS v(name, value) \
         WHERE name IN (SELECT name FROM pg_settings)",
        rows.join(", ")
    )
}

impl AdvisoryStore {
    /// Opens a session for `lock`, bounded for a lease of `ttl`.
    pub(super) async fn open_session(&self, lock: LockId, ttl: Duration) -> Result<Session> {
        let server = &self.inner.server;
        let client = match self.spare() {
            Some(client) => client,
            None => server.open(None).await?,
        };
        // One round trip: the settings, then the pid (the last row of the reply).
        let sql = format!("{}; SELECT pg_backend_pid()", settings(Bound::for_ttl(ttl)));
        let setup = client.simple_query(&sql);
        let replies = server.within("cannot set up a lock session", setup).await?;
        let pid = replies.iter().rev().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0)?.parse::<i32>().ok(),
            _ => None,
        });
        let pid = pid.ok_or_else(|| {
            crate::error::Error::Internal(format!(
                "{}: no pid in the reply to SELECT pg_backend_pid()",
                self.name()
            ))
        })?;
        Ok(Session { client, pid, lock })
    }

    /// One try, not waiting: `pg_try_advisory_lock`, and the counter bumped in the same
    /// statement when it is granted.
    pub(super) async fn try_lock(&self, s: &Session, req: &AcquireRequest) -> Result<Took> {
        let sql = format!(
            "INSERT INTO {t} AS c (lock, token, key, owner, pid, holder) \
             SELECT $1, 1, $2, $3, pg_backend_pid(), $4 WHERE pg_try_advisory_lock({a}) \
             ON CONFLICT (lock) DO UPDATE SET token = c.token + 1, key = EXCLUDED.key, \
             owner = EXCLUDED.owner, pid = EXCLUDED.pid, holder = EXCLUDED.holder \
             RETURNING token",
            t = self.counters,
            a = s.lock.args()
        );
        let (lock, holder) = (s.lock.to_string(), sql::holder_json(&req.holder));
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&lock, &req.key, &req.owner, &holder];
        let sent = Instant::now();
        let rows = self
            .inner
            .server
            .within("cannot try the lock", s.client.query(&sql, &params))
            .await?;
        Ok(match rows.first() {
            Some(row) => Took::Granted(row.get::<_, i64>(0).max(0) as u64, sent),
            None => Took::Refused,
        })
    }

    /// Waits in the server's queue for at most `pause` (`lock_timeout`), then bumps the
    /// counter. Not bounded by the client's request limit: the server's answers it.
    pub(super) async fn wait_lock(
        &self,
        s: &Session,
        req: &AcquireRequest,
        pause: Duration,
    ) -> Result<Took> {
        let ms = pause.as_millis().clamp(1, i32::MAX as u128);
        let sql = format!(
            "SET lock_timeout = {ms}; SELECT pg_advisory_lock({}); SET lock_timeout = 0",
            s.lock.args()
        );
        match s.client.simple_query(&sql).await {
            Ok(_) => {}
            Err(e) if e.code().is_some_and(|c| c.code() == "55P03") => {
                let _ = s.client.simple_query("SET lock_timeout = 0").await;
                return Ok(Took::Refused);
            }
            Err(e) => {
                return Err(self
                    .inner
                    .server
                    .unavailable("cannot wait for the lock", &e))
            }
        }
        let sent = Instant::now();
        let token = self.bump(s, req).await?;
        Ok(Took::Granted(token, sent))
    }

    /// Bumps the counter of the lock `s` holds and says who holds it now.
    async fn bump(&self, s: &Session, req: &AcquireRequest) -> Result<u64> {
        let sql = format!(
            "INSERT INTO {t} AS c (lock, token, key, owner, pid, holder) \
             VALUES ($1, 1, $2, $3, pg_backend_pid(), $4) \
             ON CONFLICT (lock) DO UPDATE SET token = c.token + 1, key = EXCLUDED.key, \
             owner = EXCLUDED.owner, pid = EXCLUDED.pid, holder = EXCLUDED.holder \
             RETURNING token",
            t = self.counters
        );
        let (lock, holder) = (s.lock.to_string(), sql::holder_json(&req.holder));
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&lock, &req.key, &req.owner, &holder];
        let bumped = s.client.query_one(&sql, &params);
        let row = self
            .inner
            .server
            .within("cannot bump the fencing counter", bumped)
            .await;
        match row {
            Ok(row) => Ok(row.get::<_, i64>(0).max(0) as u64),
            Err(e) => {
                // Never hold a lock we could not give a token to.
                let unlock = format!("SELECT pg_advisory_unlock({})", s.lock.args());
                let _ = s.client.simple_query(&unlock).await;
                Err(e)
            }
        }
    }

    /// The holder's check: the session answers (only its own session can unlock an
    /// advisory lock, so an answering session still holds it). The send time is what the
    /// lease counts from.
    pub(super) async fn check(&self, s: &Session) -> Result<Instant> {
        let sent = Instant::now();
        let ping = s.client.simple_query("SELECT 1");
        let answered = self
            .inner
            .server
            .within("cannot check the session", ping)
            .await?;
        let one = answered
            .iter()
            .any(|m| matches!(m, SimpleQueryMessage::Row(_)));
        match one {
            true => Ok(sent),
            false => Err(crate::error::Error::Transient(
                "the session gave no answer".into(),
            )),
        }
    }

    /// Unlocks and closes the session: closing alone would release the lock too, but only
    /// once the server notices.
    pub(super) async fn unlock(&self, s: &Session) -> Result<()> {
        let sql = format!("SELECT pg_advisory_unlock_all(); SELECT {}", s.pid);
        let done = s.client.simple_query(&sql);
        self.inner
            .server
            .within("cannot unlock", done)
            .await
            .map(drop)
    }

    /// Takes a waiting session out of the server's queue: `pg_cancel_backend` from the
    /// table store's connection. The session is dropped after this, which ends it (and any
    /// grant that raced the cancel) on the server.
    pub(super) async fn cancel_wait(&self, s: &Session) {
        let sql = "SELECT pg_cancel_backend($1)";
        let _ = self.on_inner("cannot cancel a wait", sql, &[&s.pid]).await;
    }
}
