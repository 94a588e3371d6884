//! The store value: one connection for requests, reopened after any failure.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use tokio::sync::{Mutex, MutexGuard};

use super::connect::{Server, Tuning};
use super::schema::{Names, Sql, ADDED};
use super::url::Target;
use crate::error::Result;

/// Locks in a MySQL or MariaDB table.
pub struct MysqlStore {
    pub(super) server: Server,
    pub(super) names: Names,
    pub(super) sql: Sql,
    conn: Mutex<Option<Conn>>,
    pub(super) watcher: Mutex<Watcher>,
}

/// What `dlock wait` keeps between its looks (see `wait.rs`).
#[derive(Default)]
pub(super) struct Watcher {
    /// Its connection, blocked on a holder's named lock.
    pub(super) conn: Option<Conn>,
    /// The named lock last found free.
    pub(super) unheld: Option<String>,
    /// The last look found no live lease.
    pub(super) free: bool,
}

/// The request connection, while one request uses it.
pub(super) type ConnGuard<'a> = MutexGuard<'a, Option<Conn>>;

/// Runs `$body` (an expression using the connection `$c`, of type
/// `Result<T, mysql_async::Error>`) on the request connection within the time limit. The
/// connection is dropped after a failure (a half-done transaction dies with it) and
/// reopened by the next request: that is how a connection the server killed comes back.
macro_rules! on_conn {
    ($store:expr, $what:expr, |$c:ident| $body:expr) => {{
        let mut guard = $store.conn().await?;
        let mut pending = $crate::backend::mysql::backend::Pending(Some(&mut *guard));
        let $c = pending.conn();
        let done = $store.server.within($what, async { $body }).await;
        pending.end(done.is_ok());
        done
    }};
}
pub(super) use on_conn;

/// The shared connection while a request runs on it. A request that fails, or whose
/// future is dropped halfway (a wait cancelled, a renewal cut short), may leave the
/// connection mid-exchange, where its next user would read the rest of the old one
/// ("Packets out of sync"): the connection is then forgotten, and the next request opens
/// another.
pub(crate) struct Pending<'a, T>(pub(crate) Option<&'a mut Option<T>>);

impl<T> Pending<'_, T> {
    pub(crate) fn conn(&mut self) -> &mut T {
        let slot = self
            .0
            .as_mut()
            .expect("a pending request has its connection");
        slot.as_mut().expect("opened by conn()")
    }

    /// The request ended: keep the connection when it succeeded.
    pub(crate) fn end(mut self, ok: bool) {
        if let Some(slot) = self.0.take().filter(|_| !ok) {
            *slot = None;
        }
    }
}

impl<T> Drop for Pending<'_, T> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            *slot = None;
        }
    }
}

impl MysqlStore {
    /// Connects to the server a `mysql://` URL names, creating the tables if missing.
    pub async fn connect(target: Target) -> Result<MysqlStore> {
        Self::connect_with(target, Tuning::default()).await
    }

    pub async fn connect_with(target: Target, tuning: Tuning) -> Result<MysqlStore> {
        let names = Names::new(&target.table);
        let store = MysqlStore {
            server: Server::new(target, tuning)?,
            sql: Sql::new(&names),
            names,
            conn: Mutex::new(None),
            watcher: Mutex::default(),
        };
        let mut guard = store.conn().await?;
        let conn = guard.as_mut().expect("opened by conn()");
        let ready = ensure_tables(conn, &store.names);
        store
            .server
            .within("cannot set up the lock table", ready)
            .await?;
        drop(guard);
        Ok(store)
    }

    /// The request connection, opened if needed.
    pub(super) async fn conn(&self) -> Result<ConnGuard<'_>> {
        let mut guard = self.conn.lock().await;
        if guard.is_none() {
            *guard = Some(self.server.open().await?);
        }
        Ok(guard)
    }

    /// The tuning in force.
    pub fn tuning(&self) -> Tuning {
        self.server.tuning
    }
}

/// Creates the tables unless both exist, and adds to a waiters table made by an older
/// dlock the columns it lacks ([`ADDED`]): an account that may not run DDL works with
/// tables created (or upgraded) ahead of time (`CREATE TABLE IF NOT EXISTS` still needs
/// the CREATE privilege on MySQL). Two first users racing on the same change collide
/// (a column added twice); the loser looks again.
async fn ensure_tables(conn: &mut Conn, n: &Names) -> std::result::Result<(), mysql_async::Error> {
    if complete(conn, n).await? {
        return Ok(());
    }
    let mut last = None;
    for _ in 0..3 {
        let (tables, present) = found(conn, n).await?;
        let changes = match tables == 2 {
            true => n.upgrade(&present).into_iter().collect(),
            false => n.ddl().to_vec(),
        };
        if changes.is_empty() {
            return Ok(());
        }
        for change in changes {
            if let Err(e) = conn.query_drop(change).await {
                last = Some(e);
                break;
            }
        }
    }
    match last {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// True when both tables exist and the waiters table has every column of [`ADDED`]: one
/// statement that names them and reads no row, so that an `exec` does not pay for a read of
/// `information_schema` (slow on MariaDB) on every start. A missing table (1146) or column
/// (1054) is `false`: [`found`] then says what to create.
async fn complete(conn: &mut Conn, n: &Names) -> std::result::Result<bool, mysql_async::Error> {
    let columns = ADDED.map(|(column, _)| column).join(", ");
    let probe = format!(
        "SELECT * FROM (SELECT 1 AS one FROM {} LIMIT 0) l, (SELECT {columns} FROM {} LIMIT 0) w",
        n.locks, n.waiters
    );
    match conn.query_drop(probe).await {
        Ok(()) => Ok(true),
        Err(mysql_async::Error::Server(e)) if e.code == 1146 || e.code == 1054 => Ok(false),
        Err(e) => Err(e),
    }
}

/// How many of the two tables exist, and which of [`ADDED`] the waiters table has: one
/// round trip, as before the columns were added.
async fn found(
    conn: &mut Conn,
    n: &Names,
) -> std::result::Result<(i64, Vec<String>), mysql_async::Error> {
    let added = ADDED.map(|(column, _)| column);
    let row: Option<(i64, Option<String>)> = conn
        .exec_first(
            "SELECT (SELECT COUNT(*) FROM information_schema.TABLES
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?)),
                    (SELECT GROUP_CONCAT(COLUMN_NAME) FROM information_schema.COLUMNS
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
                       AND COLUMN_NAME IN (?, ?, ?))",
            (
                &n.locks_plain,
                &n.waiters_plain,
                &n.waiters_plain,
                added[0],
                added[1],
                added[2],
            ),
        )
        .await?;
    let (tables, present) = row.unwrap_or_default();
    let present = present.unwrap_or_default();
    Ok((tables, present.split(',').map(str::to_string).collect()))
}
