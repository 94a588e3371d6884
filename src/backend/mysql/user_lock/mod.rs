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
//! * `backend.rs`: the store value, what it keeps of each lock it holds, and the session
//!   that holds one.
//! * `session.rs`: a session's statements: open, `GET_LOCK`, the counter, the check.
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation and
//!   `status`.

mod backend;
mod session;
mod store;

pub use self::backend::UserLockStore;
