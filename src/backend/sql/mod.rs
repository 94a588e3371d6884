//! What the SQL stores (PostgreSQL, MySQL) share, each file named after the store
//! template's part it serves:
//!
//! * `lease.rs`: the table names they accept, how a lease row reads as a `LockInfo`, how
//!   an attempt's outcome and a renewal become a lease.
//! * `shared.rs`: the steps of a group's transaction (shared and semaphore holders)
//!   written once; each store supplies its statements and its row.
//! * `status.rs`: `status` and the last runs, from the rows read.
//! * `failure.rs`: how a failure reads (one line, the key named) and whether the next try
//!   may well not meet it.

mod failure;
mod lease;
mod shared;
mod status;

pub use self::failure::{
    failure, io_error, naming, no_answer, passing_io, passing_state, rolled_back,
};
pub use self::lease::{holder_json, holder_of, identifier, info, live_group, ms, renewed, Outcome};
pub use self::shared::{Change, Changed, Decision, GroupRow};
pub(crate) use self::shared::{GroupAttempt, MemberChange};
pub use self::status::{last_runs, statuses, HeldRow, WaitingRow};
