//! The user-lock store value: dlock's table store beside it, the counter table, and the
//! sessions that hold this process's locks.

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::prelude::Queryable as _;
use mysql_async::Conn;
use tokio::sync::Mutex;

use crate::backend::mysql::backend::{MysqlStore, Pending};
use crate::backend::mysql::url::Target;
use crate::error::{Error, Result};

/// The server's limit on a user lock's name, in characters.
pub const MAX_NAME: usize = 64;

/// A session of its own for one lock; its statements are in `session.rs`.
pub struct Session {
    pub conn: Conn,
    /// `CONNECTION_ID()`: what `IS_USED_LOCK` answers, what `KILL` takes.
    pub id: u64,
}

/// A lock this process holds.
pub(super) struct Held {
    pub(super) owner: String,
    pub(super) token: u64,
    pub(super) session: Arc<Mutex<Session>>,
}

/// MySQL/MariaDB user locks, with dlock's table beside them for tokens and run records.
pub struct UserLockStore {
    /// The table store: its connection reads `status`, keeps run records, cancels waits.
    pub(super) inner: MysqlStore,
    /// `` `<table>_user_locks` ``.
    pub(super) counters: String,
    pub(super) held: Mutex<HashMap<String, Held>>,
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
    pub(super) fn name(&self) -> String {
        format!("{} (GET_LOCK)", self.inner.server.target.name)
    }

    /// Runs one statement on the table store's connection; its rows.
    pub(super) async fn on_inner<R, P>(&self, what: &str, sql: String, params: P) -> Result<Vec<R>>
    where
        R: mysql_async::prelude::FromRow + Send + 'static,
        P: Into<mysql_async::Params> + Send,
    {
        let mut guard = self.inner.conn().await?;
        let mut pending = Pending(Some(&mut *guard));
        let c = pending.conn();
        let done = self.inner.server.within(what, c.exec(sql, params)).await;
        pending.end(done.is_ok());
        done
    }

    /// A KEY the server can name a lock by.
    pub(super) fn check_name(&self, key: &str) -> Result<()> {
        let n = key.chars().count();
        if n > MAX_NAME {
            return Err(Error::Usage(format!(
                "lock '{key}': a GET_LOCK name has at most {MAX_NAME} characters, this one {n}, on {}",
                self.name()
            )));
        }
        Ok(())
    }

    pub(super) fn gone(&self, verb: &str, key: &str) -> Error {
        Error::lease_gone(verb, key, &self.name())
    }
}
