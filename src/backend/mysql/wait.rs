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
//! A `--supersede` waiter's blocking connection also holds a named lock of its own
//! ([`blocker_name`]), and blocks with a statement that first looks whether it has been
//! superseded. A newer superseding waiter, once its transaction that marked the older one
//! has committed, ends the older one's block with `KILL QUERY` on the connection that
//! named lock names: a block under way ends at once, and one that starts after the kill
//! sees the mark and returns at once; either way the older one looks again, finds itself
//! superseded and exits. MySQL lets an account kill its own sessions only (others need
//! `CONNECTION_ADMIN`): where the kill is refused, a superseding waiter still looks again
//! at least every heartbeat. Nothing lighter wakes a session blocked in `GET_LOCK`: only
//! the session holding the named lock it waits for can let it go.
//!
//! `dlock wait` on one key blocks the same way on the holder's named lock.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params};

use super::backend::{on_conn, MysqlStore, Watcher};
use super::row::{wake_in, MyWaiter, Wake};
use super::schema::blocker_name;
use crate::error::Result;

/// `ER_QUERY_INTERRUPTED`: a block ended by `KILL QUERY` (a newer superseding waiter's).
const INTERRUPTED: u16 = 1317;

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

/// Runs `text` (`Sql::block`, or `Sql::block_superseding` after its `ahead` parameters)
/// on `conn` for the named lock `name`, waiting at most `pause` in the server. A block
/// ended by `KILL QUERY` has moved.
async fn block(
    conn: &mut Conn,
    text: &str,
    ahead: &[&str],
    name: &str,
    pause: Duration,
) -> mysql_async::Result<Blocked> {
    let secs = limit_secs(conn, pause);
    let mut params: Vec<mysql_async::Value> = ahead.iter().map(|p| (*p).into()).collect();
    params.extend([name.into(), name.into(), secs.into(), name.into()]);
    let got: Option<Option<i64>> = match conn.exec_first(text, Params::Positional(params)).await {
        Err(mysql_async::Error::Server(e)) if e.code == INTERRUPTED => return Ok(Blocked::Moved),
        got => got?,
    };
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
        key: &str,
        wake: &Wake,
        pause: Duration,
    ) -> Result<Option<Blocked>> {
        let mut conn = match w.blocker.take() {
            Some(conn) => conn,
            None => match self.open_blocker(w).await {
                Some(conn) => conn,
                None => return Ok(None),
            },
        };
        w.blocking = Some(conn.id());
        let limit = pause + self.server.tuning.op_timeout;
        let (text, ahead) = match w.queueing.supersede {
            true => (&self.sql.block_superseding, vec![key, w.id.as_str()]),
            false => (&self.sql.block, Vec::new()),
        };
        let blocking = block(&mut conn, text, &ahead, &wake.name, pause);
        let done = tokio::time::timeout(limit, blocking).await;
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

    /// A waiter's blocking connection; a superseding waiter's holds its named lock
    /// ([`blocker_name`]). `None` when it cannot be opened.
    async fn open_blocker(&self, w: &MyWaiter) -> Option<Conn> {
        let mut conn = self.server.open().await.ok()?;
        if w.queueing.supersede {
            let take = conn.exec_drop("DO GET_LOCK(?, 0)", (blocker_name(&w.id),));
            self.server.within("cannot wait", take).await.ok()?;
        }
        Some(conn)
    }

    /// Ends the blocks of the waiters `ids`, which have just given way to a newer
    /// superseding waiter (whose transaction has committed): each looks again at once,
    /// finds itself superseded and exits. Best effort: one whose session may not be
    /// killed finds out at its next look.
    pub(super) async fn wake_superseded(&self, ids: &[String]) {
        for id in ids {
            let _ = self.end_block_of(id).await;
        }
    }

    /// Ends the block under way of the waiter `id` (see [`MysqlStore::wake_superseded`]).
    async fn end_block_of(&self, id: &str) -> Result<()> {
        on_conn!(self, "cannot wake a superseded waiter", |c| {
            let name = blocker_name(id);
            let session: Option<Option<u64>> =
                c.exec_first("SELECT IS_USED_LOCK(?)", (name,)).await?;
            match session.flatten() {
                Some(n) => c.query_drop(format!("KILL QUERY {n}")).await,
                None => Ok(()),
            }
        })
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
        let blocking = block(conn, &self.sql.block, &[], &name, pause);
        match tokio::time::timeout(limit, blocking).await {
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
