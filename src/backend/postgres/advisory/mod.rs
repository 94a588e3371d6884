//! `postgres://…?lock=advisory`: `exec` holds a PostgreSQL advisory lock
//! (`pg_advisory_lock`) on a session of its own for the run, so that dlock and
//! application code that takes the same advisory lock exclude each other.
//!
//! KEY names the lock as [`LockId`] says: a decimal KEY is the bigint, `A,B` the two-int
//! form, any other KEY the bigint `hashtextextended(KEY, 0)` (what an application calls to
//! take the same lock). Waiting is the server's own lock queue: a blocking
//! `pg_advisory_lock`, cancelled with `pg_cancel_backend` (see [`session`]). Fencing tokens
//! come from a counter row per lock in `<table>_advisory`, bumped by the session while it
//! holds the lock; the row also says who holds it, for `status` and re-entry.
//!
//! * `session.rs`: a holder's or waiter's session and its statements.
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation.
//! * `status.rs`: `status`, dlock's holders beside other sessions' (foreign) locks.

mod session;
mod status;
mod store;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::backend::PostgresStore;
use super::url::Target;
use crate::error::{Error, Result};

pub use self::session::Session;

/// Which advisory lock a KEY names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockId {
    /// `pg_advisory_lock(bigint)`.
    One(i64),
    /// `pg_advisory_lock(int, int)`.
    Two(i32, i32),
}

impl LockId {
    /// The lock a KEY names without asking the server: a decimal bigint or `A,B`; `None`
    /// for any other KEY, which the server hashes ([`Session::resolve`]).
    pub fn literal(key: &str) -> Option<LockId> {
        if let Some((a, b)) = key.split_once(',') {
            return Some(LockId::Two(a.trim().parse().ok()?, b.trim().parse().ok()?));
        }
        key.parse().ok().map(LockId::One)
    }

    /// The arguments of the `pg_advisory_*` functions, as SQL literals.
    pub fn args(&self) -> String {
        match self {
            LockId::One(v) => format!("{v}::bigint"),
            LockId::Two(a, b) => format!("{a}::int, {b}::int"),
        }
    }

    /// How `pg_locks` shows it: (classid, objid, objsubid).
    #[cfg(test)]
    pub fn pg_locks(&self) -> (u32, u32, i16) {
        match *self {
            LockId::One(v) => ((v >> 32) as u32, v as u32, 1),
            LockId::Two(a, b) => (a as u32, b as u32, 2),
        }
    }

    /// The lock a `pg_locks` row shows.
    pub fn from_pg_locks(classid: u32, objid: u32, objsubid: i16) -> LockId {
        match objsubid {
            2 => LockId::Two(classid as i32, objid as i32),
            _ => LockId::One(((classid as u64) << 32 | objid as u64) as i64),
        }
    }
}

impl std::fmt::Display for LockId {
    /// As a KEY names it: `N` or `A,B`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockId::One(v) => write!(f, "{v}"),
            LockId::Two(a, b) => write!(f, "{a},{b}"),
        }
    }
}

/// A lock this process holds: the session that holds it and what it was granted.
struct Held {
    owner: String,
    token: u64,
    session: Arc<Session>,
}

/// PostgreSQL advisory locks, with dlock's table beside them for tokens and run records.
pub struct AdvisoryStore {
    /// The table store: its connection reads `status`, keeps run records, cancels waits.
    inner: PostgresStore,
    /// `"schema"."<table>_advisory"`.
    counters: String,
    held: Mutex<HashMap<String, Held>>,
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
    fn spare(&self) -> Option<tokio_postgres::Client> {
        self.spare_slot().take().filter(|c| !c.is_closed())
    }

    fn spare_slot(&self) -> std::sync::MutexGuard<'_, Option<tokio_postgres::Client>> {
        self.spare.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the table store's connection (its tables made if missing) and makes the
    /// counter table if missing.
    async fn set_up(&self) -> Result<()> {
        drop(self.inner.conn().await?);
        let store = self;
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (lock text PRIMARY KEY, token bigint NOT NULL, \
             key text NOT NULL, owner text NOT NULL, pid integer NOT NULL, holder text)",
            store.counters
        );
        // The rule of `schema::ensure_tables`: two first users racing on `CREATE TABLE IF
        // NOT EXISTS` can collide in the catalog, and the loser's next try sees the table.
        let what = "cannot set up the counter table";
        for _ in 0..2 {
            if store.on_inner(what, &sql, &[]).await.is_ok() {
                return Ok(());
            }
        }
        store.on_inner(what, &sql, &[]).await?;
        Ok(())
    }

    /// `postgres://host:port/db (advisory locks)`, for messages.
    fn name(&self) -> String {
        format!("{} (advisory locks)", self.inner.server.target.name)
    }

    /// Runs one statement on the table store's connection, within its time limit.
    async fn on_inner(
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
    async fn lock_of(&self, key: &str) -> Result<LockId> {
        if let Some(id) = LockId::literal(key) {
            return Ok(id);
        }
        let sql = "SELECT hashtextextended($1, 0)";
        let rows = self.on_inner("cannot hash the key", sql, &[&key]).await?;
        let v = rows.first().map_or(0, |r| r.get::<_, i64>(0));
        Ok(LockId::One(v))
    }

    fn gone(&self, verb: &str, key: &str) -> Error {
        Error::lease_gone(verb, key, &self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::LockId;

    #[test]
    fn keys_name_locks() {
        assert_eq!(LockId::literal("42"), Some(LockId::One(42)));
        assert_eq!(LockId::literal("-7"), Some(LockId::One(-7)));
        assert_eq!(LockId::literal("1,2"), Some(LockId::Two(1, 2)));
        assert_eq!(LockId::literal("nightly"), None);
        assert_eq!(LockId::literal("1,x"), None);
        assert_eq!(LockId::literal("99999999999999999999"), None);
    }

    #[test]
    fn pg_locks_round_trip() {
        for id in [
            LockId::One(0),
            LockId::One(-1),
            LockId::One(i64::MIN),
            LockId::One(1 << 40 | 5),
            LockId::Two(-3, 7),
        ] {
            let (c, o, s) = id.pg_locks();
            assert_eq!(LockId::from_pg_locks(c, o, s), id);
        }
    }
}
