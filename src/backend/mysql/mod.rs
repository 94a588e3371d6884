//! The MySQL and MariaDB backend: a lease table with expiry on the server's clock, a
//! per-key fencing counter committed with each grant, a FIFO queue of waiters. MySQL has
//! no notifications: a waiter blocks on the named lock (`GET_LOCK`) of the one ahead of
//! it, or looks again on a bounded, jittered schedule when that one keeps none. Leases
//! live by TTL only (`detached` makes no difference), so a
//! `dlock lock` outlives its process and a holder's connection may break and come back.
//!
//! * `url.rs`: `mysql://` URLs: server, database, table, TLS, password.
//! * `connect.rs`: connections (plain or rustls), session settings, timeouts, errors.
//! * `schema.rs`: the tables and every statement.
//! * `backend.rs`: the store value and its request connection.
//! * `lease.rs`: one attempt, renew, hold-at-least, release, leaving the queue.
//! * `row.rs`: what `lease.rs` and `shared.rs` both read: the waiter, the key's row, the queue.
//! * `shared.rs`: `--shared` and `--limit N`: a group of holders in the key's one row:
//!   the statements of the steps `backend/sql/shared.rs` runs.
//! * `status.rs`: `status` and the last-run record.
//! * `user_lock/`: `?lock=get_lock`, the application's `GET_LOCK` locks held by a
//!   session of dlock's ([`UserLockStore`]).
//! * `wait.rs`: waiters and watchers blocked on named locks.
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation and
//!   its re-check schedule.

mod backend;
mod connect;
mod lease;
mod row;
pub mod schema;
mod shared;
mod status;
mod store;
pub mod url;
mod user_lock;
mod wait;

pub use self::backend::MysqlStore;
pub use self::connect::Tuning;
pub use self::user_lock::UserLockStore;
