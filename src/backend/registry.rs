//! The URL schemes dlock understands, in one table: what each opens, its line in the
//! `--url` help, and how its URLs combine. Adding a store is one entry here (plus its
//! folder and its cargo feature); nothing else lists schemes.
//!
//! Every store but the local one is a cargo feature. A scheme whose store this dlock was
//! built without stays in the table, so that its URL gets one line that says so (exit 2,
//! nothing opened) rather than "unsupported", and the help stays the same in every build.

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;

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
use super::url::redact as redact_url;
#[cfg(feature = "zookeeper")]
use super::zookeeper;
use super::{local, memory, Backend};
use crate::error::{Error, Result};

/// Opens one URL; `exclusive` when the caller makes one request at a time (the CLI).
type OpenFn = for<'a> fn(&'a str, bool) -> BoxFuture<'a, Result<Arc<dyn Backend>>>;
/// Opens a majority quorum of several URLs of one family.
type QuorumFn = for<'a> fn(&'a [String]) -> BoxFuture<'a, Result<Arc<dyn Backend>>>;

/// One kind of backend URL.
pub struct Scheme {
    /// The URL prefixes that select it, e.g. `redis://`.
    pub prefixes: &'static [&'static str],
    /// Its full forms in the long `--url` help (`--help`); empty for schemes kept out of
    /// the help (tests only).
    pub help: &'static str,
    /// Its one line in the short `--url` help (`-h`): the URL's shape, and the store.
    pub summary: (&'static str, &'static str),
    /// Schemes of one family may form a quorum together.
    pub family: &'static str,
    /// The store it opens, as [`STORES`] names it.
    pub store: &'static str,
    /// Checks a URL before anything is opened (bad input is exit 2, nothing touched).
    pub check: fn(&str) -> Result<()>,
    pub open: OpenFn,
}

/// The stores: each one's name, the cargo feature that builds it in (Cargo.toml; the
/// local store is always in) and whether this dlock was built with it.
pub static STORES: &[(&str, &str, bool)] = &[
    ("local", "", true),
    ("redis", "redis", cfg!(feature = "redis")),
    ("redlock", "redis", cfg!(feature = "redis")),
    ("etcd", "etcd", cfg!(feature = "etcd")),
    ("zookeeper", "zookeeper", cfg!(feature = "zookeeper")),
    ("postgres", "postgres", cfg!(feature = "postgres")),
    ("mysql", "mysql", cfg!(feature = "mysql")),
    ("memcached", "memcached", cfg!(feature = "memcached")),
];

/// The stores this dlock was built with, for `dlock --version`.
pub fn built_stores() -> Vec<&'static str> {
    STORES.iter().filter(|s| s.2).map(|s| s.0).collect()
}

/// Families whose URLs, given several, form a majority quorum: the family and how
/// the quorum is opened. (A build without a family's store refuses its URLs one by one.)
static QUORUMS: &[(&str, &str, QuorumFn)] = &[
    ("redis", "Redlock", open_redlock),
    ("memcached", "memcached", open_memcached_quorum),
];

/// Every scheme, in the order the help lists them.
pub static SCHEMES: &[Scheme] = &[
    Scheme {
        prefixes: &["redis://", "rediss://"],
        help: "redis://[user:password@]host[:port][/db][?min_replicas=N[&min_replicas_timeout=MS]] (N replicas acknowledge each grant and renewal, by WAIT; also on redis+unix:// and redis+sentinel://), rediss:// (TLS); ?layout=plain on any of them, Cluster included, and on every URL of a Redlock quorum: KEY is the application's own lock key (SET KEY token NX PX, as redis-py Lock and node redlock take it; waiters poll, at most 250ms apart; exclusive only)",
        summary: ("redis[s]://HOST[:PORT]", "one Redis server; several: Redlock"),
        family: "redis",
        store: "redis",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["redis+unix://", "unix://"],
        help: "redis+unix:///PATH (a Unix socket)",
        summary: ("redis+unix:///PATH", "one Redis server on a Unix socket"),
        family: "redis",
        store: "redis",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["redis+sentinel://", "rediss+sentinel://"],
        help: "redis+sentinel://host:port[,host:port]/MASTER (the master Sentinel names)",
        summary: ("redis+sentinel://S1,S2/MASTER", "the master Sentinel names"),
        family: "redis",
        store: "redis",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["redis+cluster://", "rediss+cluster://"],
        help: "redis+cluster://[user:password@]host:port[,host:port…] (any nodes of one Redis Cluster; it follows the slot map), rediss+cluster:// (TLS)",
        summary: ("redis+cluster://N1,N2", "a Redis Cluster"),
        family: "redis-cluster",
        store: "redis",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["etcd://", "etcds://"],
        help: "etcd://[user:password@]host:port[,host:port…][?prefix=P] (one etcd cluster; TTLs round up to whole seconds), etcds:// (TLS)",
        summary: ("etcd[s]://H1,H2", "one etcd cluster"),
        family: "etcd",
        store: "etcd",
        check: check_etcd,
        open: open_etcd,
    },
    Scheme {
        prefixes: &["memcached://"],
        help: "memcached://host[:port] (best effort: no persistence, no fairness; TTLs whole seconds, 3s to 30d; several form a quorum)",
        summary: ("memcached://HOST[:PORT]", "memcached, best effort"),
        family: "memcached",
        store: "memcached",
        check: check_memcached,
        open: open_memcached,
    },
    Scheme {
        prefixes: &["zk://", "zks://"],
        help: "zk://[user:password@]host:port[,host:port…][/chroot] (one ZooKeeper ensemble; Curator's lock recipe), zks:// (TLS, port 2281 when none is named)",
        summary: ("zk[s]://H1,H2[/CHROOT]", "one ZooKeeper ensemble"),
        family: "zookeeper",
        store: "zookeeper",
        check: check_zookeeper,
        open: open_zookeeper,
    },
    Scheme {
        prefixes: &["postgres://", "postgresql://"],
        help: "postgres://[user[:password]@]host[:port]/db[?sslmode=require&schema=S&table=T&lock=advisory] (password also from PGPASSWORD)",
        summary: ("postgres://[USER@]HOST/DB", "PostgreSQL"),
        family: "postgres",
        store: "postgres",
        check: check_postgres,
        open: open_postgres,
    },
    Scheme {
        prefixes: &["mysql://", "mariadb://"],
        help: "mysql://[user[:password]@]host[:port]/db[?ssl-mode=REQUIRED&table=T&lock=get_lock] (MySQL 8, MariaDB 10.6+; password also from MYSQL_PWD; also mariadb://)",
        summary: ("mysql://[USER@]HOST/DB", "MySQL or MariaDB"),
        family: "mysql",
        store: "mysql",
        check: check_mysql,
        open: open_mysql,
    },
    Scheme {
        prefixes: &["file://"],
        help: "file://DIR (the embedded local store)",
        summary: ("file://DIR", "the local store (the default)"),
        family: "file",
        store: "local",
        check: check_file,
        open: open_file,
    },
    Scheme {
        prefixes: &["memory://"],
        help: "",
        summary: ("", ""),
        family: "memory",
        store: "memory",
        check: no_check,
        open: open_memory,
    },
];

/// The scheme of `url`, if dlock knows it.
pub fn find(url: &str) -> Option<&'static Scheme> {
    SCHEMES
        .iter()
        .find(|s| s.prefixes.iter().any(|p| url.starts_with(p)))
}

/// The scheme of `url`, or the error that names what is supported.
pub fn scheme_of(url: &str) -> Result<&'static Scheme> {
    find(url).ok_or_else(|| {
        let scheme = match url.split_once("://") {
            Some((s, _)) if super::url::is_scheme(s) => format!("scheme '{s}'"),
            _ => "no scheme".to_string(),
        };
        Error::Usage(format!(
            "unsupported backend URL {} ({scheme}; supported: {})",
            redact_url(url),
            supported()
        ))
    })
}

/// `redis://, rediss://, …`: every documented prefix.
pub fn supported() -> String {
    let documented = SCHEMES.iter().filter(|s| !s.help.is_empty());
    let prefixes: Vec<&str> = documented
        .flat_map(|s| s.prefixes.iter().copied())
        .collect();
    prefixes.join(", ")
}

/// The schemes' lines for the `--url` help.
pub fn url_help() -> String {
    let lines: Vec<&str> = SCHEMES
        .iter()
        .map(|s| s.help)
        .filter(|h| !h.is_empty())
        .collect();
    lines.join("; ")
}

/// The short `--url` help: one line per scheme, as the registry lists them.
pub fn url_summary() -> String {
    let shown = || {
        SCHEMES
            .iter()
            .map(|s| s.summary)
            .filter(|(f, _)| !f.is_empty())
    };
    let width = shown().map(|(f, _)| f.chars().count()).max().unwrap_or(0);
    let lines: Vec<String> = shown()
        .map(|(form, what)| format!("{form:width$}  {what}"))
        .collect();
    lines.join("\n")
}

/// The quorum that `urls` (two or more) form, with its name for messages.
pub fn quorum_of(urls: &[String]) -> Result<(&'static str, QuorumFn)> {
    let family = scheme_of(&urls[0])?.family;
    let quorum = QUORUMS.iter().find(|(f, _, _)| *f == family);
    for u in urls {
        if quorum.is_none() || scheme_of(u)?.family != family {
            let kinds: Vec<String> = QUORUMS
                .iter()
                .map(|(f, name, _)| format!("{name}: {f} URLs"))
                .collect();
            return Err(Error::Usage(format!(
                "several URLs make a majority quorum of one kind of store ({}), not {}",
                kinds.join("; "),
                redact_url(u)
            )));
        }
    }
    let (_, name, open) = quorum.expect("checked above");
    #[cfg(feature = "redis")]
    if family == "redis" {
        for u in urls {
            redis::refuse_min_replicas(u, "in a Redlock quorum")?;
        }
        redis::quorum_is_plain(urls)?;
    }
    Ok((name, *open))
}

fn no_check(_: &str) -> Result<()> {
    Ok(())
}

/// The check of every scheme whose store this dlock was built without: exit 2, one line.
#[allow(dead_code)] // in a build with every store
fn left_out(url: &str) -> Result<()> {
    let store = find(url).map_or("?", |s| s.store);
    let feature = STORES.iter().find(|s| s.0 == store).map_or("?", |s| s.1);
    Err(Error::built_without(&redact_url(url), store, feature))
}

#[allow(dead_code)] // in a build with every store
fn left_out_open(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move { Err(left_out(url).expect_err("left out")) })
}

#[allow(dead_code)] // in a build with every store; each URL was refused first
fn left_out_quorum(urls: &[String]) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    left_out_open(&urls[0], false)
}

// What names a left-out store's functions in the table.
#[cfg(not(feature = "etcd"))]
use self::{left_out as check_etcd, left_out_open as open_etcd};
#[cfg(not(feature = "zookeeper"))]
use self::{left_out as check_zookeeper, left_out_open as open_zookeeper};
#[cfg(not(feature = "postgres"))]
use self::{left_out as check_postgres, left_out_open as open_postgres};
#[cfg(not(feature = "mysql"))]
use self::{left_out as check_mysql, left_out_open as open_mysql};
#[cfg(not(feature = "redis"))]
use self::{left_out as check_redis, left_out_open as open_redis, left_out_quorum as open_redlock};
#[cfg(not(feature = "memcached"))]
use self::{
    left_out as check_memcached, left_out_open as open_memcached,
    left_out_quorum as open_memcached_quorum,
};

#[cfg(feature = "redis")]
/// Every Redis scheme: the same reading as when it is opened (`RedisBackend::connect`).
fn check_redis(url: &str) -> Result<()> {
    redis::parse_url(url, None).map(drop)
}

#[cfg(feature = "etcd")]
fn check_etcd(url: &str) -> Result<()> {
    etcd::url::parse(url).map(drop)
}

#[cfg(feature = "etcd")]
fn open_etcd(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let t = etcd::url::parse(url)?;
        let store = etcd::store::EtcdStore::connect(&t).await?;
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

#[cfg(feature = "memcached")]
fn check_memcached(url: &str) -> Result<()> {
    memcached::url::parse(url).map(drop)
}

#[cfg(feature = "memcached")]
fn open_memcached(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let t = memcached::url::parse(url)?;
        let store = memcached::MemcachedStore::open(&t, memcached::client::Tuning::default());
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

#[cfg(feature = "memcached")]
fn open_memcached_quorum(urls: &[String]) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let targets = urls
            .iter()
            .map(|u| memcached::url::parse(u))
            .collect::<Result<Vec<_>>>()?;
        let tuning = memcached::client::Tuning::default();
        let quorum = memcached::MemcachedQuorum::open(&targets, tuning)?;
        Ok(Arc::new(quorum) as Arc<dyn Backend>)
    })
}

#[cfg(feature = "zookeeper")]
fn check_zookeeper(url: &str) -> Result<()> {
    zookeeper::url::parse(url).map(drop)
}

#[cfg(feature = "zookeeper")]
fn open_zookeeper(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let target = zookeeper::url::parse(url)?;
        let store = zookeeper::ZkStore::new(target);
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

#[cfg(feature = "postgres")]
fn check_postgres(url: &str) -> Result<()> {
    postgres::url::parse(url).map(drop)
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let target = postgres::url::parse(url)?;
        if target.advisory {
            let store = postgres::AdvisoryStore::connect(target).await?;
            return Ok(Arc::new(store) as Arc<dyn Backend>);
        }
        let store = postgres::PostgresStore::connect(target).await?;
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

#[cfg(feature = "mysql")]
fn check_mysql(url: &str) -> Result<()> {
    mysql::url::parse(url).map(drop)
}

#[cfg(feature = "mysql")]
fn open_mysql(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let target = mysql::url::parse(url)?;
        if target.user_locks {
            let store = mysql::UserLockStore::connect(target).await?;
            return Ok(Arc::new(store) as Arc<dyn Backend>);
        }
        let store = mysql::MysqlStore::connect(target).await?;
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

fn check_file(url: &str) -> Result<()> {
    match url.strip_prefix("file://") {
        Some("") | None => Err(Error::Usage(
            "file:// needs a directory, e.g. file:///var/tmp/dlock".into(),
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(feature = "redis")]
fn open_redis(url: &str, exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let tuning = redis::Tuning {
            exclusive,
            ..redis::Tuning::default()
        };
        redis::open(url, tuning).await
    })
}

#[cfg(feature = "redis")]
fn open_redlock(urls: &[String]) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let backend = redlock::RedlockBackend::connect(urls).await?;
        Ok(Arc::new(backend) as Arc<dyn Backend>)
    })
}

fn open_file(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        check_file(url)?;
        let dir = PathBuf::from(&url["file://".len()..]);
        Ok(Arc::new(local::LocalBackend::open(&dir)?) as Arc<dyn Backend>)
    })
}

/// `memory://NAME`: one in-memory store per name, shared within this process.
fn open_memory(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let name = &url["memory://".len()..];
        Ok(memory::MemoryStore::named(name) as Arc<dyn Backend>)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_and_quorum_is_of_a_listed_store() {
        let listed = |store: &str| STORES.iter().any(|s| s.0 == store);
        for s in SCHEMES {
            assert!(s.store == "memory" || listed(s.store), "{}", s.prefixes[0]);
        }
        for (family, _, _) in QUORUMS {
            assert!(listed(family), "{family}");
        }
        assert_eq!(built_stores()[0], "local");
    }

    #[test]
    fn a_store_left_out_is_named_with_its_feature_never_the_password() {
        let err = left_out("etcds://u:Secr3t@h:1").unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        let text = err.to_string();
        assert!(
            text.ends_with(": this dlock was built without the etcd store (cargo feature `etcd`)"),
            "{text}"
        );
        assert!(
            text.starts_with("etcds://") && !text.contains("Secr3t"),
            "{text}"
        );
    }
}
