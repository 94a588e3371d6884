//! The ZooKeeper backend: the lock recipe of Apache Curator's `InterProcessMutex`, so
//! that dlock and a JVM service using Curator exclude each other on the same path.
//!
//! * [`layout`]: lock paths, contender node names, what a node's data says (pure); who
//!   of the line holds and what a waiter watches are [`crate::backend::line`]'s, shared
//!   with etcd.
//! * [`session`]: connecting, what a session's timeout gives a lease, error wording.
//! * [`line`]: creating contender nodes and reading a lock's line in order.
//! * [`attempt`]: one attempt on the line, and what a waiter watches.
//! * [`store`]: the [`LockStore`](crate::backend::store::LockStore) built from them.
//! * [`listing`]: every lock in the tree, and watching locks for `dlock wait`.
//! * [`runs`]: the last-run record beside each lock.
//! * [`tls`]: TLS settings for `zks://`.
//! * [`url`]: `zk://` and `zks://` URLs.

mod attempt;
pub mod layout;
pub mod line;
mod listing;
mod runs;
pub mod session;
pub mod store;
mod tls;
pub mod url;

pub use self::store::ZkStore;
