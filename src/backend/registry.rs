//! The URL schemes dlock understands, in one table: what each opens, its line in the
//! `--url` help, and how its URLs combine. Adding a store is one entry here (plus its
//! folder); nothing else lists schemes.

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::url::redact as redact_url;
use super::{etcd, local, memcached, memory, mysql, postgres, redis, redlock, zookeeper, Backend};
use crate::error::{Error, Result};

/// Opens one URL; `exclusive` when the caller makes one request at a time (the CLI).
type OpenFn = for<'a> fn(&'a str, bool) -> BoxFuture<'a, Result<Arc<dyn Backend>>>;
/// Opens a majority quorum of several URLs of one family.
type QuorumFn = for<'a> fn(&'a [String]) -> BoxFuture<'a, Result<Arc<dyn Backend>>>;

/// One kind of backend URL.
pub struct Scheme {
    /// The URL prefixes that select it, e.g. `redis://`.
    pub prefixes: &'static [&'static str],
    /// Its line in the `--url` help; empty for schemes kept out of it (tests only).
    pub help: &'static str,
    /// Schemes of one family may form a quorum together.
    pub family: &'static str,
    /// Checks a URL before anything is opened (bad input is exit 2, nothing touched).
    pub check: fn(&str) -> Result<()>,
    pub open: OpenFn,
}

/// Families whose URLs, given several, form a majority quorum: the family and how
/// the quorum is opened.
static QUORUMS: &[(&str, &str, QuorumFn)] = &[
    ("redis", "Redlock", open_redlock),
    ("memcached", "memcached", open_memcached_quorum),
];

/// Every scheme, in the order the help lists them.
pub static SCHEMES: &[Scheme] = &[
    Scheme {
        prefixes: &["redis://", "rediss://"],
        help: "redis://[user:password@]host[:port][/db][?min_replicas=N[&min_replicas_timeout=MS]] (N replicas acknowledge each grant and renewal, by WAIT; also on redis+unix:// and redis+sentinel://), rediss:// (TLS)",
        family: "redis",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["redis+unix://", "unix://"],
        help: "redis+unix:///PATH (a Unix socket)",
        family: "redis",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["redis+sentinel://", "rediss+sentinel://"],
        help: "redis+sentinel://host:port[,host:port]/MASTER (the master Sentinel names)",
        family: "redis",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["redis+cluster://", "rediss+cluster://"],
        help: "redis+cluster://[user:password@]host:port[,host:port…] (any nodes of one Redis Cluster; it follows the slot map), rediss+cluster:// (TLS)",
        family: "redis-cluster",
        check: check_redis,
        open: open_redis,
    },
    Scheme {
        prefixes: &["etcd://", "etcds://"],
        help: "etcd://[user:password@]host:port[,host:port…][?prefix=P] (one etcd cluster; TTLs round up to whole seconds), etcds:// (TLS)",
        family: "etcd",
        check: check_etcd,
        open: open_etcd,
    },
    Scheme {
        prefixes: &["memcached://"],
        help: "memcached://host[:port] (best effort: no persistence, no fairness; TTLs whole seconds, 3s to 30d; several form a quorum)",
        family: "memcached",
        check: check_memcached,
        open: open_memcached,
    },
    Scheme {
        prefixes: &["zk://", "zks://"],
        help: "zk://[user:password@]host:port[,host:port…][/chroot] (one ZooKeeper ensemble; Curator's lock recipe), zks:// (TLS, port 2281 when none is named)",
        family: "zookeeper",
        check: check_zookeeper,
        open: open_zookeeper,
    },
    Scheme {
        prefixes: &["postgres://", "postgresql://"],
        help: "postgres://[user[:password]@]host[:port]/db[?sslmode=require&schema=S&table=T&lock=advisory] (password also from PGPASSWORD)",
        family: "postgres",
        check: check_postgres,
        open: open_postgres,
    },
    Scheme {
        prefixes: &["mysql://", "mariadb://"],
        help: "mysql://[user[:password]@]host[:port]/db[?ssl-mode=REQUIRED&table=T&lock=get_lock] (MySQL 8, MariaDB 10.6+; password also from MYSQL_PWD; also mariadb://)",
        family: "mysql",
        check: check_mysql,
        open: open_mysql,
    },
    Scheme {
        prefixes: &["file://"],
        help: "file://DIR (the embedded local store)",
        family: "file",
        check: check_file,
        open: open_file,
    },
    Scheme {
        prefixes: &["memory://"],
        help: "",
        family: "memory",
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
    if family == "redis" {
        for u in urls {
            redis::refuse_min_replicas(u, "in a Redlock quorum")?;
        }
    }
    Ok((name, *open))
}

fn no_check(_: &str) -> Result<()> {
    Ok(())
}

/// Every Redis scheme: the same reading as when it is opened (`RedisBackend::connect`).
fn check_redis(url: &str) -> Result<()> {
    redis::parse_url(url, None).map(drop)
}

fn check_etcd(url: &str) -> Result<()> {
    etcd::url::parse(url).map(drop)
}

fn open_etcd(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let t = etcd::url::parse(url)?;
        let store = etcd::store::EtcdStore::connect(&t).await?;
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

fn check_memcached(url: &str) -> Result<()> {
    memcached::url::parse(url).map(drop)
}

fn open_memcached(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let t = memcached::url::parse(url)?;
        let store = memcached::MemcachedStore::open(&t, memcached::client::Tuning::default());
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

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

fn check_zookeeper(url: &str) -> Result<()> {
    zookeeper::url::parse(url).map(drop)
}

fn open_zookeeper(url: &str, _exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let target = zookeeper::url::parse(url)?;
        let store = zookeeper::ZkStore::new(target);
        Ok(Arc::new(store) as Arc<dyn Backend>)
    })
}

fn check_postgres(url: &str) -> Result<()> {
    postgres::url::parse(url).map(drop)
}

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

fn check_mysql(url: &str) -> Result<()> {
    mysql::url::parse(url).map(drop)
}

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

fn open_redis(url: &str, exclusive: bool) -> BoxFuture<'_, Result<Arc<dyn Backend>>> {
    Box::pin(async move {
        let tuning = redis::Tuning {
            exclusive,
            ..redis::Tuning::default()
        };
        let backend = redis::RedisBackend::connect_with(url, tuning).await?;
        Ok(Arc::new(backend) as Arc<dyn Backend>)
    })
}

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
