//! The advisory-lock store value: dlock's table store beside it, the counter table, and
//! the sessions that hold this process's locks.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use super::lock_id::LockId;
use crate::backend::postgres::backend::PostgresStore;
use crate::backend::postgres::url::Target;
use crate::error::{Error, Result};

/// A session of its own for one lock; its statements are in `session.rs`.
pub struct Session {
    pub client: Client,
    /// The server's process for it (`pg_backend_pid()`): what `pg_locks` shows, what
    /// `pg_cancel_backend` takes.
    pub pid: i32,
    pub lock: LockId,
}

/// A lock this process holds: the session that holds it and what it was granted.
pub(super) struct Held {
    pub(super) owner: String,
    pub(super) token: u64,
    pub(super) session: Arc<Session>,
}

/// PostgreSQL advisory locks, with dlock's table beside them for tokens and run records.
pub struct AdvisoryStore {
    /// The table store: its connection reads `status`, keeps run records, cancels waits.
    pub(super) inner: PostgresStore,
    /// `"schema"."<table>_advisory"`.
    pub(super) counters: String,
    pub(super) held: Mutex<HashMap<String, Held>>,
    /// A connection opened beside the table store's while that one is set up, for the
    /// first lock session: `exec` then pays for one connection's set-up, not two in a row.
    spare: std::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl AdvisoryStore {
    /// Connects, creating dlock's tables (and the counter table) if missing; the first lock
    /// session's connection is opened meanwhile (see [`Self::spare`]).
    pub async fn connect(target: Target) -> Result<AdvisoryStore> {
        let counters = match &target.schema {
            Some(s) => format!("\"{s}\".\"{}_advisory\"", target.table),
            None => format!("\"{}_advisory\"", target.table),
        };
        let inner = PostgresStore::unopened(target, Default::default())?;
        let store = AdvisoryStore {
            inner,
            counters,
            held: Mutex::new(HashMap::new()),
            spare: std::sync::Mutex::new(None),
        };
        let (ready, spare) = tokio::join!(store.set_up(), store.inner.server.open(None));
        ready?;
        // Failing here while the table store's connection worked is transient: the first
        // session opens its own connection again, and says why if it fails.
        *store.spare_slot() = spare.ok();
        Ok(store)
    }

    /// The connection [`Self::connect`] opened for the first session, if it is still open.
    pub(super) fn spare(&self) -> Option<tokio_postgres::Client> {
        self.spare_slot().take().filter(|c| !c.is_closed())
    }

    fn spare_slot(&self) -> std::sync::MutexGuard<'_, Option<tokio_postgres::Client>> {
        self.spare.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the table store's connection (its tables made if missing) and makes the
    /// counter table if missing.
    async fn set_up(&self) -> Result<()> {
        drop(self.inner.conn().await?);
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (lock text PRIMARY KEY, token bigint NOT NULL, \
             key text NOT NULL, owner text NOT NULL, pid integer NOT NULL, holder text)",
            self.counters
        );
        // The rule of `schema::ensure_tables`: two first users racing on `CREATE TABLE IF
        // NOT EXISTS` can collide in the catalog, and the loser's next try sees the table.
        let what = "cannot set up the counter table";
        for _ in 0..2 {
            if self.on_inner(what, &sql, &[]).await.is_ok() {
                return Ok(());
            }
        }
        self.on_inner(what, &sql, &[]).await?;
        Ok(())
    }

    /// `postgres://host:port/db (advisory locks)`, for messages.
    pub(super) fn name(&self) -> String {
        format!("{} (advisory locks)", self.inner.server.target.name)
    }

    /// Runs one statement on the table store's connection, within its time limit.
    pub(super) async fn on_inner(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let mut guard = self.inner.conn().await?;
        let client = &guard.as_ref().expect("opened by conn()").client;
        let done = self
            .inner
            .server
            .within(what, client.query(sql, params))
            .await;
        if done.is_err() {
            // A request cut short may leave the connection mid-exchange: open another.
            *guard = None;
        }
        done
    }

    /// The lock `key` names, asking the server to hash a KEY that is not a number.
    pub(super) async fn lock_of(&self, key: &str) -> Result<LockId> {
        if let Some(id) = LockId::literal(key) {
            return Ok(id);
        }
        let sql = "SELECT hashtextextended($1, 0)";
        let rows = self.on_inner("cannot hash the key", sql, &[&key]).await?;
        let v = rows.first().map_or(0, |r| r.get::<_, i64>(0));
        Ok(LockId::One(v))
    }

    pub(super) fn gone(&self, verb: &str, key: &str) -> Error {
        Error::lease_gone(verb, key, &self.name())
    }
}
