//! `mysql://…?lock=get_lock`: `exec` holds a MySQL/MariaDB user lock (`GET_LOCK(KEY, …)`)
//! on a session of its own for the run, so that dlock and application code that takes the
//! same named lock exclude each other.
//!
//! KEY is the lock's name, verbatim (at most 64 characters, the server's limit). Waiting is
//! the server's: `GET_LOCK` with a timeout, re-issued; a cancelled wait is ended with
//! `KILL QUERY` and its session closed. Fencing tokens come from a counter row per name in
//! `<table>_user_locks`, bumped by the holding session right after the grant; the row also
//! names the holder for `status` and re-entry. `IS_USED_LOCK` says who holds a name.
//!
//! * `session.rs`: a holder's or waiter's session and its statements.
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation and
//!   `status`.

mod session;
mod store;

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::prelude::Queryable as _;
use tokio::sync::Mutex;

use self::session::Session;
use super::backend::MysqlStore;
use super::url::Target;
use crate::error::{Error, Result};

/// The server's limit on a user lock's name, in characters.
pub const MAX_NAME: usize = 64;

/// A lock this process holds.
struct Held {
    owner: String,
    token: u64,
    session: Arc<Mutex<Session>>,
}

/// MySQL/MariaDB user locks, with dlock's table beside them for tokens and run records.
pub struct UserLockStore {
    /// The table store: its connection reads `status`, keeps run records, cancels waits.
    inner: MysqlStore,
    /// `` `<table>_user_locks` ``.
    counters: String,
    held: Mutex<HashMap<String, Held>>,
}

impl UserLockStore {
    /// Connects, creating dlock's tables (and the counter table) if missing.
    pub async fn connect(target: Target) -> Result<UserLockStore> {
        let counters = format!("`{}_user_locks`", target.table);
        let inner = MysqlStore::connect(target).await?;
        let store = UserLockStore {
            inner,
            counters,
            held: Mutex::new(HashMap::new()),
        };
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} (name VARCHAR(64) CHARACTER SET utf8mb4 \
             COLLATE utf8mb4_bin PRIMARY KEY, token BIGINT NOT NULL, owner VARCHAR(255) NOT NULL, \
             conn BIGINT NOT NULL, holder TEXT)",
            store.counters
        );
        store
            .on_inner::<u8, _>("cannot set up the counter table", ddl, ())
            .await?;
        Ok(store)
    }

    /// `mysql://host:port/db (GET_LOCK)`, for messages.
    fn name(&self) -> String {
        format!("{} (GET_LOCK)", self.inner.server.target.name)
    }

    /// Runs one statement on the table store's connection; its rows.
    async fn on_inner<R, P>(&self, what: &str, sql: String, params: P) -> Result<Vec<R>>
    where
        R: mysql_async::prelude::FromRow + Send + 'static,
        P: Into<mysql_async::Params> + Send,
    {
        let mut guard = self.inner.conn().await?;
        let mut pending = super::backend::Pending(Some(&mut *guard));
        let c = pending.conn();
        let done = self.inner.server.within(what, c.exec(sql, params)).await;
        pending.end(done.is_ok());
        done
    }

    /// A KEY the server can name a lock by.
    fn check_name(&self, key: &str) -> Result<()> {
        let n = key.chars().count();
        if n > MAX_NAME {
            return Err(Error::Usage(format!(
                "lock '{key}': a GET_LOCK name has at most {MAX_NAME} characters, this one {n}, on {}",
                self.name()
            )));
        }
        Ok(())
    }

    fn gone(&self, verb: &str, key: &str) -> Error {
        Error::lease_gone(verb, key, &self.name())
    }
}
