//! Several memcached servers as one lock: a majority quorum with Redlock's rules, the
//! votes counted by [`crate::backend::quorum::votes`] as for Redlock.
//!
//! Each server keeps the single-server layout of [`super`] (add + compare-and-swap,
//! its own fencing counter). With `N` servers the quorum is `Q = N/2 + 1`:
//!
//! * acquire: every server at once, each within a short limit; won when a majority
//!   granted and validity is left, `TTL − 1 s` (memcached may expire an item a second
//!   early) less the time taken and the clock drift; grants beside a lost round are
//!   given back at once. The token is the largest of the grants; a server whose
//!   counter is behind (restarted empty, or refused) is raised to it, and a majority
//!   must hold the lease stamped with it, so tokens keep increasing when a server
//!   restarts (see `round.rs`).
//! * renew: needs a majority; release: sent to all; status: each server's view;
//!   last-run records: written to all, kept on a majority, read from any majority.
//! * waiting: as on one memcached, a jittered re-check with no fairness.
//!
//! What it survives: the loss of a minority of its servers (each restart empties one;
//! the restart rule of Redlock applies: a server that restarted must stay out for the
//! longest TTL in use, or a key it grants afresh may still be held on the others).
//!
//! * `member.rs`: one server, its timed requests, and the servers that do not answer.
//! * `store.rs`: the store value and its `LockStore` implementation.
//! * `round.rs`: one acquire round, the fencing tokens, giving back.

mod member;
mod round;
mod store;

pub use self::store::MemcachedQuorum;
