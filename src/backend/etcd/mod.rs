//! The etcd v3 backend: the lock recipe of etcd's `concurrency.Mutex`, so that dlock and
//! `etcdctl lock` contend for the same locks.
//!
//! * [`proto`]: the protobuf messages, written by hand (no `protoc` at build time).
//! * [`client`]: the gRPC calls (KV, Lease, Watch) over tonic.

pub mod client;
pub mod proto;
