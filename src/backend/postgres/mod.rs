//! The PostgreSQL backend: a lease table with expiry on the server's clock, a per-key
//! fencing counter committed with each grant, a FIFO queue of waiters woken by
//! LISTEN/NOTIFY. Leases live by TTL only (`detached` makes no difference), so a
//! `dlock lock` outlives its process and a holder's connection may break and come back.
//!
//! * `advisory/`: `?lock=advisory`, the application's advisory locks held by a session
//!   of dlock's ([`AdvisoryStore`]).
//! * `url.rs`: `postgres://` URLs: server, database, table, schema, TLS, password.
//! * `connect.rs`: connections (plain or rustls), timeouts, one-line errors.
//! * `schema.rs`: the tables and every statement.
//! * `backend.rs`: the store value and its one connection (requests, and LISTEN).
//! * `lease.rs`: one attempt, renew, release, leaving the queue.
//! * `shared.rs`: shared and semaphore holders, kept in the key's one row: the
//!   statements of the steps `backend/sql/shared.rs` runs.
//! * `row.rs`: what `lease.rs` and `shared.rs` both read and write: the waiter, the key's
//!   row, the queue, and the grant, refusal and leave statements.
//! * `status.rs`: `status` and the last-run record.
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation,
//!   sleeping on notifications.

mod advisory;
mod backend;
mod connect;
mod lease;
mod row;
pub mod schema;
mod shared;
mod status;
mod store;
pub mod url;

pub use self::advisory::AdvisoryStore;
pub use self::backend::PostgresStore;
pub use self::connect::Tuning;
