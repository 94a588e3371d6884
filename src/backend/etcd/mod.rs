//! The etcd v3 backend: the lock recipe of etcd's `concurrency.Mutex`, so that dlock and
//! `etcdctl lock` contend for the same locks.
//!
//! * [`proto`]: the protobuf messages, written by hand (no `protoc` at build time).
//! * [`client`]: the gRPC calls (KV, Lease, Watch) over tonic, tried again through the
//!   next member while they fail for a while (a leader change, a dead member).
//! * [`failure`]: how a call failed, by its gRPC status: retried, or reported.
//! * [`streams`]: the keep-alive and watch streams, opened again when they break.
//! * [`recipe`]: the lock keys, their values and the transactions (a shared or semaphore
//!   contender's too), as pure functions; who of the line holds, what a key's value says
//!   and a line's status are [`crate::backend::line`]'s, shared with ZooKeeper.
//! * [`shared`]: the attempt and the wait of a shared or semaphore contender.
//! * [`proclaim`]: an election's keys: the bare proclamation, dlock's record beside it.
//! * [`runs`]: the last run and last success of each lock name.
//! * [`store`]: the acquisition built from them.
//! * [`seam`]: the [`LockStore`](crate::backend::store::LockStore), and the wording of its errors.
//! * [`deletion`]: a waiter's wait for the contender before it (or any) to go.
//! * [`status`]: `dlock status`, each lock's holder and waiters.
//! * [`linger`]: a holder's key moved to a lease of its own (`exec --hold-at-least`), and
//!   watching a lock for a release (`dlock wait`).
//! * [`took`]: the locks this process took, and their release with the record of the run.
//! * [`tls`]: `etcds://` certificates, from the same variables as `rediss://`.
//! * [`url`]: `etcd://` and `etcds://` URLs.

pub mod client;
pub mod deletion;
pub mod failure;
pub mod linger;
pub mod proclaim;
pub mod proto;
pub mod recipe;
pub mod runs;
pub mod seam;
pub mod shared;
pub mod status;
pub mod store;
pub mod streams;
pub mod tls;
pub mod took;
pub mod url;
