//! The Memcached backend: add + compare-and-swap on memcached's meta protocol (≥ 1.6).
//! Best effort: memcached keeps nothing on disk and may evict any item, so a lock it
//! holds survives neither a restart nor memory pressure (see docs/stores/memcached.md).
//!
//! * `url`: `memcached://host:port`.
//! * `client`: the meta commands over pooled TCP connections.
//! * `keys`: the item layout and the value of a lock item.
//! * `ttl`: the time limits memcached imposes (whole seconds, 30 days at most).
//! * `fence`: the fencing counter, and what can be told of its loss.
//! * `store`: the store value and its `LockStore` implementation.
//! * `lease`: take (or re-enter), renew and release, each owner-checked by CAS id.
//! * `shared`: `--shared` and `--limit N` holders, kept as one group in the lock item.
//! * `status`: `status KEY`, and listing every lock by `lru_crawler metadump`.
//! * `runs`: the last-run records.
//! * `member`: what a quorum asks of one server; `quorum`: several servers as a majority
//!   quorum with Redlock's rules.

pub mod client;
pub mod fence;
pub mod keys;
mod lease;
mod member;
pub mod quorum;
mod runs;
mod shared;
mod status;
pub mod store;
pub mod ttl;
pub mod url;

pub use self::quorum::MemcachedQuorum;
pub use self::store::MemcachedStore;
