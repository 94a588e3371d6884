//! Waking waiters and watchers without polling: named locks (`GET_LOCK`).
//!
//! Each exclusive acquisition takes a named lock of its own (`dlock-w:<waiter id>`) on its
//! request connection in its first attempt, and keeps it while it waits and, granted,
//! while it holds the key; a release lets it go right after its commit, leaving the queue
//! lets it go too, and so does the end of its session (a process that dies). A waiter
//! blocks in the server, on a connection of its own, on the named lock of the waiter just
//! ahead of it, or at the head of the queue on the holder's: it is woken only when that
//! one moves, and sends nothing meanwhile. The head also looks again at least every
//! heartbeat (a lease may be freed by another process, `unlock --force`, or expire), the
//! others every `behind`. Where the one ahead holds no named lock (a `dlock lock` that
//! has exited, a shared holder, a connection lost and not yet back), the waiter looks
//! again on the schedule of `store.rs`.
//!
//! `dlock wait` on one key blocks the same way on the holder's named lock.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::backend::{on_conn, MysqlStore, Watcher};
use super::row::{wake_in, MyWaiter, Wake};
use crate::error::Result;

/// Blocks until the named lock is free (taking it and letting it go at once), at most the
/// given seconds: 1 when it was released, 0 at the time limit, -1 when it was free from
/// the start (its owner keeps none: the caller looks again on a schedule).
const BLOCK: &str =
    "SELECT IF(IS_USED_LOCK(?) IS NULL, -1, IF(GET_LOCK(?, ?), RELEASE_LOCK(?), 0))";

/// How a block ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Blocked {
    /// Released, or the time limit: look again.
    Moved,
    /// Nobody held the named lock: look again, and then on the schedule.
    Unheld,
}

/// `GET_LOCK`'s time limit for `pause`: MariaDB (10.1.2 and later) takes fractions of a
/// second, MySQL rounds to whole seconds (a pause under half a second would not wait at
/// all), so there it is rounded up.
fn limit_secs(conn: &Conn, pause: Duration) -> f64 {
    let secs = pause.as_secs_f64().max(0.001);
    match conn.server_version().0 >= 10 {
        true => secs,
        false => secs.ceil(),
    }
}

/// Runs [`BLOCK`] on `conn` for `name`, waiting at most `pause` in the server.
async fn block(conn: &mut Conn, name: &str, pause: Duration) -> mysql_async::Result<Blocked> {
    let secs = limit_secs(conn, pause);
    let got: Option<Option<i64>> = conn.exec_first(BLOCK, (name, name, secs, name)).await?;
    Ok(match got.flatten() {
        Some(-1) => Blocked::Unheld,
        _ => Blocked::Moved,
    })
}

impl MysqlStore {
    /// Blocks `w` on `wake` for at most `pause`, on the waiter's own connection (opened
    /// at its first block). `None` when that connection cannot be opened: the caller
    /// sleeps on its schedule instead.
    pub(super) async fn block_on(
        &self,
        w: &mut MyWaiter,
        wake: &Wake,
        pause: Duration,
    ) -> Result<Option<Blocked>> {
        let mut conn = match w.blocker.take() {
            Some(conn) => conn,
            None => match self.server.open().await {
                Ok(conn) => conn,
                Err(_) => return Ok(None),
            },
        };
        w.blocking = Some(conn.id());
        let limit = pause + self.server.tuning.op_timeout;
        let done = tokio::time::timeout(limit, block(&mut conn, &wake.name, pause)).await;
        w.blocking = None;
        match done {
            Ok(Ok(blocked)) => {
                w.blocker = Some(conn);
                Ok(Some(blocked))
            }
            Ok(Err(e)) => Err(self.server.unavailable("cannot wait for the key", &e)),
            Err(_) => Err(self.server.timed_out("cannot wait for the key", limit)),
        }
    }

    /// Ends on the server a block that `w` gave up halfway (its future dropped by a cancel
    /// or the deadline): its session would otherwise wait on until its time limit.
    pub(super) async fn end_block(&self, w: &mut MyWaiter) {
        if let Some(id) = w.blocking.take() {
            let _ = self.kill_query(id).await;
        }
    }

    async fn kill_query(&self, id: u32) -> Result<()> {
        on_conn!(self, "cannot end a wait", |c| {
            c.query_drop(format!("KILL QUERY {id}")).await
        })
    }

    /// Watches one key held by a lease whose named lock is held: true when it blocked
    /// (and the key may have changed) or found the key freed, false when the caller
    /// should poll.
    pub(super) async fn watch_one(&self, key: &str, pause: Duration) -> Result<bool> {
        let mut watcher = self.watcher.lock().await;
        let Watcher { conn, unheld, free } = &mut *watcher;
        if conn.is_none() {
            *conn = Some(self.server.open().await?);
        }
        let slot = conn;
        let conn = slot.as_mut().expect("opened above");
        let read = conn.exec_first::<Option<String>, _, _>(self.sql.wake.as_str(), (key,));
        let holder = match self.server.within("cannot read the lease", read).await {
            Ok(holder) => holder,
            Err(e) => {
                *slot = None;
                return Err(e);
            }
        };
        let Some(holder) = holder else {
            // Freed since the caller looked (a release while this connection opened):
            // look again at once, but poll if the caller keeps finding it held.
            return Ok(!std::mem::replace(free, true));
        };
        *free = false;
        let Some(name) = holder.as_deref().and_then(wake_in) else {
            return Ok(false);
        };
        if unheld.as_deref() == Some(name.as_str()) {
            return Ok(false);
        }
        let limit = pause + self.server.tuning.op_timeout;
        match tokio::time::timeout(limit, block(conn, &name, pause)).await {
            Ok(Ok(Blocked::Moved)) => Ok(true),
            Ok(Ok(Blocked::Unheld)) => {
                // Released just now, or its holder keeps none: look once, then poll.
                *unheld = Some(name);
                Ok(true)
            }
            Ok(Err(e)) => {
                *slot = None;
                Err(self.server.unavailable("cannot wait for the key", &e))
            }
            Err(_) => {
                *slot = None;
                Err(self.server.timed_out("cannot wait for the key", limit))
            }
        }
    }
}
