//! The Redis backend: one server, atomic Lua scripts, FIFO waiters woken one at a time.
//!
//! Leases live by TTL only: `detached` makes no difference here. A connection that broke
//! is reopened on the next call; every request has a timeout. One server, the master
//! Sentinel names, or a Redis Cluster: every key of a lock shares its hash slot. Waiting is the generic loop's
//! ([`crate::backend::waiting`]); this store gives it its primitives.
//!
//! * `url.rs`: every Redis URL read once into a typed target (server, Sentinel, Cluster).
//! * `connect.rs`: TLS, Sentinel, timing knobs, one-line errors without passwords.
//! * `cluster.rs`: the Redis Cluster client, and the masters (for listing).
//! * `conn.rs`: one connection type over a server or a Cluster.
//! * `backend.rs`: the backend value and its shared connection.
//! * `keys.rs`: the key layout, and the names of one lock's keys.
//! * `scripts.rs`: the Lua scripts, sent by hash.
//! * `reply.rs`: reading replies, lease fields and holders.
//! * `lease.rs`: one attempt (also Redlock's), renew, release.
//! * `wait.rs`: a waiter's attempts, its sleep until woken, and leaving the queue.
//! * `replicas.rs`: `?min_replicas`, a `WAIT` after each grant and renewal.
//! * `linger.rs`: a lease left to expire by itself (`--hold-at-least`), and watching for
//!   a release (`dlock wait`).
//! * `status.rs`: leases and waiters for `status`, and listing by `SCAN`.
//! * `runs.rs`: the last run and last success of each key (`status KEY`).
//! * `store.rs`: the [`LockStore`](crate::backend::store::LockStore) implementation.
//! * `plain/`: `?layout=plain`, the application's canonical lock on its own key.

mod backend;
mod cluster;
mod conn;
mod connect;
mod keys;
mod lease;
mod linger;
mod plain;
mod replicas;
mod reply;
mod runs;
mod scripts;
mod status;
mod store;
mod url;
mod wait;

pub use self::backend::RedisBackend;
pub use self::connect::{tls_certificates, Tuning};
pub(crate) use self::lease::{Busy, Tried, Vote};
pub use self::plain::{PlainBackend, POLL_MAX as PLAIN_POLL_MAX};
pub(crate) use self::replicas::refuse as refuse_min_replicas;
pub use self::url::{connection_info, SentinelTarget, SENTINEL_PORT};
pub(crate) use self::url::{parse as parse_url, Target};

/// Opens the store `target` (read from `url`) names: dlock's own layout, or
/// `?layout=plain`.
pub(crate) async fn open(
    target: &Target,
    url: &str,
    tuning: Tuning,
) -> crate::error::Result<std::sync::Arc<dyn crate::backend::Backend>> {
    let backend = RedisBackend::connect_target(target, url, tuning).await?;
    Ok(match target.layout {
        self::url::Layout::Dlock => std::sync::Arc::new(backend),
        self::url::Layout::Plain => std::sync::Arc::new(PlainBackend::new(backend)),
    })
}

/// Whether the servers of a Redlock quorum keep the plain layout (`?layout=plain` on
/// every URL) or dlock's (on none); servers that disagree are refused (exit 2): the servers
/// of one lock must keep it in one layout, or a key would be two different locks. Each
/// server is given as its URL shown (redacted) and the target read from it.
pub(crate) fn quorum_is_plain(servers: &[(String, &Target)]) -> crate::error::Result<bool> {
    let layouts: Vec<_> = servers.iter().map(|(_, t)| t.layout).collect();
    if let Some(i) = layouts.iter().position(|l| *l != layouts[0]) {
        let shown = |i: usize| &servers[i].0;
        return Err(crate::error::Error::Usage(format!(
            "Redlock servers {} and {} keep different layouts: put ?layout=plain on every URL of the quorum, or on none",
            shown(0),
            shown(i)
        )));
    }
    Ok(layouts.first() == Some(&self::url::Layout::Plain))
}
