//! A store URL read once, into the typed target its store opens: what a
//! [`BackendSpec`](super::spec::BackendSpec) carries from the check of `--url` to the
//! opening of the backend, so that the two never read the URL apart.
//!
//! The scheme table ([`super::registry`]) reads each URL into a [`Typed`] target; opening
//! one is a `match` on it here, so a target can only be opened by the store that read it.

use std::path::PathBuf;
use std::sync::Arc;

#[cfg(feature = "etcd")]
use super::etcd;
#[cfg(feature = "memcached")]
use super::memcached;
#[cfg(feature = "mysql")]
use super::mysql;
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "redis")]
use super::redis;
#[cfg(feature = "redis")]
use super::redlock;
use super::url::redact;
use super::{local, memory, Backend};
use crate::error::{Error, Result};

/// What one URL names, as its store's `url.rs` read it.
#[derive(Clone)]
pub(crate) enum Typed {
    #[cfg(feature = "redis")]
    Redis(redis::Target),
    #[cfg(feature = "etcd")]
    Etcd(etcd::url::Target),
    #[cfg(feature = "zookeeper")]
    Zookeeper(super::zookeeper::url::Target),
    #[cfg(feature = "postgres")]
    Postgres(postgres::url::Target),
    #[cfg(feature = "mysql")]
    Mysql(mysql::url::Target),
    #[cfg(feature = "memcached")]
    Memcached(memcached::url::Target),
    /// `file://DIR`: the local store in DIR.
    File(PathBuf),
    /// `memory://NAME` (tests): one in-memory store per name, shared within this process.
    Memory(String),
}

/// One URL and its typed target. Shown (`Debug`) only redacted; two are equal when
/// their URLs are.
#[derive(Clone)]
pub struct Target {
    /// As given: it may hold a password, and is shown only through [`redact`].
    url: String,
    /// The scheme's family (see [`super::registry::Scheme::family`]).
    family: &'static str,
    /// Boxed: a PostgreSQL or MySQL target is large beside the rest of a spec.
    typed: Box<Typed>,
}

impl Target {
    pub(crate) fn new(url: &str, family: &'static str, typed: Typed) -> Target {
        Target {
            url: url.to_string(),
            family,
            typed: Box::new(typed),
        }
    }

    /// The URL as it may be shown anywhere (see [`redact`]).
    pub fn shown(&self) -> String {
        redact(&self.url)
    }

    /// The name the backend opened from this target gives itself in `status` and in
    /// every message: never a password.
    pub fn describe(&self) -> String {
        match self.typed.as_ref() {
            #[cfg(feature = "redis")]
            Typed::Redis(_) => redact(&self.url),
            #[cfg(feature = "etcd")]
            Typed::Etcd(t) => t.name.clone(),
            #[cfg(feature = "zookeeper")]
            Typed::Zookeeper(t) => t.name.clone(),
            #[cfg(feature = "postgres")]
            Typed::Postgres(t) => t.name.clone(),
            #[cfg(feature = "mysql")]
            Typed::Mysql(t) => t.name.clone(),
            #[cfg(feature = "memcached")]
            Typed::Memcached(t) => t.name.clone(),
            Typed::File(dir) => format!("file://{}", dir.display()),
            Typed::Memory(name) => name.clone(),
        }
    }

    pub(crate) fn family(&self) -> &'static str {
        self.family
    }

    pub(crate) fn typed(&self) -> &Typed {
        self.typed.as_ref()
    }

    /// The URL as given, password and all (tests compare it).
    #[cfg(test)]
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Opens the backend; `exclusive` when the caller makes one request at a time (the
    /// CLI, see [`super::redis::Tuning::exclusive`]).
    pub async fn open(&self, exclusive: bool) -> Result<Arc<dyn Backend>> {
        let _ = exclusive; // only Redis tunes for it
        Ok(match self.typed.as_ref() {
            #[cfg(feature = "redis")]
            Typed::Redis(t) => {
                let tuning = redis::Tuning {
                    exclusive,
                    ..redis::Tuning::default()
                };
                redis::open(t, &self.url, tuning).await?
            }
            #[cfg(feature = "etcd")]
            Typed::Etcd(t) => Arc::new(etcd::store::EtcdStore::connect(t).await?),
            #[cfg(feature = "zookeeper")]
            Typed::Zookeeper(t) => Arc::new(super::zookeeper::ZkStore::new(t.clone())),
            #[cfg(feature = "postgres")]
            Typed::Postgres(t) if t.advisory => {
                Arc::new(postgres::AdvisoryStore::connect(t.clone()).await?)
            }
            #[cfg(feature = "postgres")]
            Typed::Postgres(t) => Arc::new(postgres::PostgresStore::connect(t.clone()).await?),
            #[cfg(feature = "mysql")]
            Typed::Mysql(t) if t.user_locks => {
                Arc::new(mysql::UserLockStore::connect(t.clone()).await?)
            }
            #[cfg(feature = "mysql")]
            Typed::Mysql(t) => Arc::new(mysql::MysqlStore::connect(t.clone()).await?),
            #[cfg(feature = "memcached")]
            Typed::Memcached(t) => {
                let tuning = memcached::client::Tuning::default();
                Arc::new(memcached::MemcachedStore::open(t, tuning))
            }
            Typed::File(dir) => Arc::new(local::LocalBackend::open(dir)?),
            Typed::Memory(name) => memory::MemoryStore::named(name),
        })
    }
}

/// Opens the majority quorum `targets` form (their family's quorum was checked by
/// [`super::registry::quorum_of`]).
pub async fn open_quorum(targets: &[Target]) -> Result<Arc<dyn Backend>> {
    #[cfg(feature = "redis")]
    if let Some(servers) = all(targets, |t| match t {
        Typed::Redis(r) => Some(r),
        _ => None,
    }) {
        let backend = redlock::RedlockBackend::connect_targets(&servers, Default::default());
        return Ok(Arc::new(backend.await?));
    }
    #[cfg(feature = "memcached")]
    if let Some(servers) = all(targets, |t| match t {
        Typed::Memcached(m) => Some(m.clone()),
        _ => None,
    }) {
        let servers: Vec<_> = servers.into_iter().map(|(_, m)| m).collect();
        let tuning = memcached::client::Tuning::default();
        return Ok(Arc::new(memcached::MemcachedQuorum::open(
            &servers, tuning,
        )?));
    }
    let shown: Vec<String> = targets.iter().map(Target::shown).collect();
    Err(Error::Internal(format!(
        "no quorum opens {}",
        shown.join(",")
    )))
}

/// `pick` of every target's typed target (with its URL), when it picks each one.
#[allow(dead_code)] // in a build without a quorum store
fn all<'a, T>(
    targets: &'a [Target],
    pick: impl Fn(&'a Typed) -> Option<T>,
) -> Option<Vec<(&'a str, T)>> {
    targets
        .iter()
        .map(|t| pick(t.typed()).map(|p| (t.url.as_str(), p)))
        .collect()
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Target").field(&self.shown()).finish()
    }
}

impl PartialEq for Target {
    fn eq(&self, other: &Target) -> bool {
        self.url == other.url
    }
}

impl Eq for Target {}
