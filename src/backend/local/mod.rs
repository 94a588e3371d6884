//! The embedded local store: locks for the processes and users of one host, kept in a
//! directory (default `/var/tmp/dlock`, or `DLOCK_DIR`, or `file://DIR`), with no daemon.
//! Kernel locks do its waiting, so it keeps its own acquire loop instead of the generic
//! one (the design: `backend.rs`).
//!
//! * `backend.rs`: the backend value, acquire, renew, release, status; the design.
//! * `waiter.rs`: what an acquisition keeps between attempts, and its sleep.
//! * `wait.rs`: running a transition under the state mutex; kernel-lock and file waits.
//! * `store.rs`: the transitions of a key's state, in a session under its mutex.
//! * `held.rs`: those of a held key (release, renew, detach) and its status.
//! * `shared.rs`: keys held by several at once (`--shared`, `--limit N`).
//! * `queue.rs`: the waiter list shown by `status`.
//! * `order.rs`: the served order once a waiter asks for `--priority` or `--supersede`.
//! * `file.rs`: opening and creating key files; the boot id and the boot clock.
//! * `record.rs`: the record's two slots and the waiter list, encoded.
//! * `locks.rs`: the byte-range locks: mutex, waiting and holding locks.
//! * `names.rs`: key file names.
//! * `runs.rs`: the last run and last success of a key, in a file beside its key file.
//! * `linger.rs`: a bound lease turned into one with an expiry (`--hold-at-least`).
//! * `watch.rs`: waking `dlock wait` on a release (the holder's kernel lock, inotify).

mod backend;
mod file;
mod held;
mod linger;
mod locks;
mod names;
mod order;
mod queue;
mod record;
mod runs;
mod shared;
mod store;
mod wait;
mod waiter;
mod watch;

pub use self::backend::LocalBackend;
