//! `?layout=plain`: the canonical Redis lock on the application's own key, so that dlock
//! and application code (redis-py's `Lock`, node `redlock`, `SET K uuid NX PX`) exclude
//! each other.
//!
//! K holds the owner's token alone, as those libraries store theirs: taken by
//! `SET K token NX PX ttl`, renewed by a compare-and-`PEXPIRE`, released by a
//! compare-and-delete. dlock writes nothing else under K; its fencing counter and its
//! holder's details live beside it (`keys.rs`), in K's Cluster slot, and are written by
//! the same scripts. Applications do not notify a release, and no queue can be kept that
//! they would respect: waiters poll with the shared back-off, at least every
//! [`POLL_MAX`], and any poller may win.
//!
//! * `keys.rs`: the names beside K, and the rule that keeps them in K's slot.
//! * `lease.rs`: one attempt, renew, release, one key's holder (one script each).
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation and
//!   the listing for `status`.

mod keys;
mod lease;
mod store;

use std::time::Duration;

use super::backend::RedisBackend;

/// The longest pause between two polls of a waiter: the hand-off from an application's
/// release to a waiting dlock takes at most about this (plus a round trip).
pub const POLL_MAX: Duration = Duration::from_millis(250);

/// Locks kept as applications keep theirs, on one server, the master Sentinel names, or
/// a Cluster (whichever `inner` connects to).
pub struct PlainBackend {
    inner: RedisBackend,
}

impl PlainBackend {
    /// The plain layout over a connected backend.
    pub fn new(inner: RedisBackend) -> PlainBackend {
        PlainBackend { inner }
    }
}
