//! Redlock: one lock held on a majority of several independent Redis servers, so that it
//! survives the loss of a minority of them.
//!
//! Each server keeps the single-server layout and scripts of [`super::redis`] (dlock's own,
//! or `?layout=plain` on every URL: the application's canonical lock on K itself, as
//! node's `redlock` takes it on each server); this module runs one
//! [`RedisBackend`](super::redis::RedisBackend) per server and adds the quorum.
//! With `N` servers the quorum is `Q = N/2 + 1` (2 of 3, 3 of 5), more for a semaphore
//! ([`super::quorum::votes::quorum_for`]); the votes are counted by
//! [`super::quorum::votes`]. Shared and semaphore holders are kept by each server as one
//! Redis keeps them; a server that finds the caller's sharing at odds with its holders'
//! refuses the whole attempt (exit 2).
//!
//! * `tuning.rs`: the timing knobs and the per-server timeouts.
//! * `member.rs`: one server of the quorum, its reconnection and its timed requests.
//! * `backend.rs`: the backend value, connecting, renew, release, status; the safety of
//!   the lock and its limits.
//! * `round.rs`: one acquire round, the fencing tokens, and giving back.
//! * `renew.rs`: renewing on as many servers as the holder's sharing needs.
//! * `runs.rs`: the last-run records, kept on every server and read from a majority.
//! * `wait.rs`: how a waiter waits, and why Redlock keeps its own waiting loop.

mod backend;
mod member;
mod renew;
mod round;
mod runs;
mod tuning;
mod wait;

pub use self::backend::RedlockBackend;
pub use self::tuning::{acquire_timeout, max_acquire_timeout, renew_timeout, RedlockTuning};
pub use crate::backend::quorum::votes::quorum;
