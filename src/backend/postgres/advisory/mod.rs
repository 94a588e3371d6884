//! `postgres://…?lock=advisory`: `exec` holds a PostgreSQL advisory lock
//! (`pg_advisory_lock`) on a session of its own for the run, so that dlock and
//! application code that takes the same advisory lock exclude each other.
//!
//! KEY names the lock as [`LockId`] says: a decimal KEY is the bigint, `A,B` the two-int
//! form, any other KEY the bigint `hashtextextended(KEY, 0)` (what an application calls to
//! take the same lock). Waiting is the server's own lock queue: a blocking
//! `pg_advisory_lock`, cancelled with `pg_cancel_backend` (see `session.rs`). Fencing tokens
//! come from a counter row per lock in `<table>_advisory`, bumped by the session while it
//! holds the lock; the row also says who holds it, for `status` and re-entry.
//!
//! * `lock_id.rs`: [`LockId`], which advisory lock a KEY names.
//! * `backend.rs`: the store value, what it keeps of each lock it holds, and the session
//!   that holds one.
//! * `session.rs`: a session's statements: open, try, wait, bump, check, unlock.
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation.
//! * `status.rs`: `status`, dlock's holders beside other sessions' (foreign) locks.

mod backend;
mod lock_id;
mod session;
mod status;
mod store;

pub use self::backend::AdvisoryStore;
