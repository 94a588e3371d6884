//! The etcd v3 backend: the lock recipe of etcd's `concurrency.Mutex`, so that dlock and
//! `etcdctl lock` contend for the same locks.
//!
//! * [`proto`]: the protobuf messages, written by hand (no `protoc` at build time).
//! * [`client`]: the gRPC calls (KV, Lease, Watch) over tonic.
//! * [`recipe`]: the lock keys, their values and the transactions, as pure functions.
//! * [`store`]: the [`LockStore`](crate::backend::store::LockStore) built from them.
//! * [`url`]: `etcd://` URLs.

pub mod client;
pub mod proto;
pub mod recipe;
pub mod store;
pub mod url;
