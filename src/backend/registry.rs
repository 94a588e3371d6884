//! The URL schemes dlock understands, in one table: how each reads its URLs into a
//! typed target, its line in the `--url` help, and how its URLs combine. Adding a store
//! is one entry here and its variant of [`Typed`] (plus its folder and its cargo feature);
//! nothing else lists schemes. Each URL is read once, here ([`read`]); what opens it is
//! the target ([`super::target`]).
//!
//! Every store but the local one is a cargo feature. A scheme whose store this dlock was
//! built without stays in the table, so that its URL gets one line that says so (exit 2,
//! nothing opened) rather than "unsupported", and the help stays the same in every build.

use std::path::PathBuf;

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
use super::target::{Target, Typed};
use super::url::redact as redact_url;
#[cfg(feature = "zookeeper")]
use super::zookeeper;
use crate::error::{Error, Result};

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
    /// Reads a URL into its typed target before anything is opened (bad input is exit 2,
    /// nothing touched).
    pub(crate) check: fn(&str) -> Result<Typed>,
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

/// Families whose URLs, given several, form a majority quorum: the family and the
/// quorum's name ([`super::target::open_quorum`] opens it). (A build without a family's
/// store refuses its URLs one by one.)
static QUORUMS: &[(&str, &str)] = &[("redis", "Redlock"), ("memcached", "memcached")];

/// Every scheme, in the order the help lists them.
pub static SCHEMES: &[Scheme] = &[
    Scheme {
        prefixes: &["redis://", "rediss://"],
        help: "redis://[user:password@]host[:port][/db][?min_replicas=N[&min_replicas_timeout=MS]] (N replicas acknowledge each grant and renewal, by WAIT; also on redis+unix:// and redis+sentinel://), rediss:// (TLS); ?layout=plain on any of them, Cluster included, and on every URL of a Redlock quorum: KEY is the application's own lock key (SET KEY token NX PX, as redis-py Lock and node redlock take it; waiters poll, at most 250ms apart; exclusive only)",
        summary: ("redis[s]://HOST[:PORT]", "one Redis server; several: Redlock"),
        family: "redis",
        store: "redis",
        check: check_redis,
    },
    Scheme {
        prefixes: &["redis+unix://", "unix://"],
        help: "redis+unix:///PATH (a Unix socket)",
        summary: ("redis+unix:///PATH", "one Redis server on a Unix socket"),
        family: "redis",
        store: "redis",
        check: check_redis,
    },
    Scheme {
        prefixes: &["redis+sentinel://", "rediss+sentinel://"],
        help: "redis+sentinel://host:port[,host:port]/MASTER (the master Sentinel names)",
        summary: ("redis+sentinel://S1,S2/MASTER", "the master Sentinel names"),
        family: "redis",
        store: "redis",
        check: check_redis,
    },
    Scheme {
        prefixes: &["redis+cluster://", "rediss+cluster://"],
        help: "redis+cluster://[user:password@]host:port[,host:port…] (any nodes of one Redis Cluster; it follows the slot map), rediss+cluster:// (TLS)",
        summary: ("redis+cluster://N1,N2", "a Redis Cluster"),
        family: "redis-cluster",
        store: "redis",
        check: check_redis,
    },
    Scheme {
        prefixes: &["etcd://", "etcds://"],
        help: "etcd://[user:password@]host:port[,host:port…][?prefix=P] (one etcd cluster; TTLs round up to whole seconds), etcds:// (TLS)",
        summary: ("etcd[s]://H1,H2", "one etcd cluster"),
        family: "etcd",
        store: "etcd",
        check: check_etcd,
    },
    Scheme {
        prefixes: &["memcached://"],
        help: "memcached://host[:port] (best effort: no persistence, no fairness; TTLs whole seconds, 3s to 30d; several form a quorum)",
        summary: ("memcached://HOST[:PORT]", "memcached, best effort"),
        family: "memcached",
        store: "memcached",
        check: check_memcached,
    },
    Scheme {
        prefixes: &["zk://", "zks://"],
        help: "zk://[user:password@]host:port[,host:port…][/chroot] (one ZooKeeper ensemble; Curator's lock recipe), zks:// (TLS, port 2281 when none is named)",
        summary: ("zk[s]://H1,H2[/CHROOT]", "one ZooKeeper ensemble"),
        family: "zookeeper",
        store: "zookeeper",
        check: check_zookeeper,
    },
    Scheme {
        prefixes: &["postgres://", "postgresql://"],
        help: "postgres://[user[:password]@]host[:port]/db[?sslmode=require&schema=S&table=T&lock=advisory] (password also from PGPASSWORD)",
        summary: ("postgres://[USER@]HOST/DB", "PostgreSQL"),
        family: "postgres",
        store: "postgres",
        check: check_postgres,
    },
    Scheme {
        prefixes: &["mysql://", "mariadb://"],
        help: "mysql://[user[:password]@]host[:port]/db[?ssl-mode=REQUIRED&table=T&lock=get_lock] (MySQL 8, MariaDB 10.6+; password also from MYSQL_PWD; also mariadb://)",
        summary: ("mysql://[USER@]HOST/DB", "MySQL or MariaDB"),
        family: "mysql",
        store: "mysql",
        check: check_mysql,
    },
    Scheme {
        prefixes: &["file://"],
        help: "file://DIR (the embedded local store)",
        summary: ("file://DIR", "the local store (the default)"),
        family: "file",
        store: "local",
        check: check_file,
    },
    Scheme {
        prefixes: &["memory://"],
        help: "",
        summary: ("", ""),
        family: "memory",
        store: "memory",
        check: check_memory,
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

/// Reads `url` into its typed target: the one reading of a URL, which checking and
/// opening share.
pub fn read(url: &str) -> Result<Target> {
    let scheme = scheme_of(url)?;
    Ok(Target::new(url, scheme.family, (scheme.check)(url)?))
}

/// The name (for messages) of the quorum that `targets` (two or more) form.
pub fn quorum_of(targets: &[Target]) -> Result<&'static str> {
    let family = targets[0].family();
    let quorum = QUORUMS.iter().find(|(f, _)| *f == family);
    for t in targets {
        if quorum.is_none() || t.family() != family {
            let kinds: Vec<String> = QUORUMS
                .iter()
                .map(|(f, name)| format!("{name}: {f} URLs"))
                .collect();
            return Err(Error::Usage(format!(
                "several URLs make a majority quorum of one kind of store ({}), not {}",
                kinds.join("; "),
                t.shown()
            )));
        }
    }
    #[cfg(feature = "redis")]
    {
        let mut servers = Vec::new();
        for t in targets {
            if let Typed::Redis(r) = t.typed() {
                redis::refuse_min_replicas(r, &t.shown(), "in a Redlock quorum")?;
                servers.push((t.shown(), r));
            }
        }
        if !servers.is_empty() {
            redis::quorum_is_plain(&servers)?;
        }
    }
    Ok(quorum.expect("checked above").1)
}

fn check_memory(url: &str) -> Result<Typed> {
    Ok(Typed::Memory(url["memory://".len()..].to_string()))
}

/// The check of every scheme whose store this dlock was built without: exit 2, one line.
#[allow(dead_code)] // in a build with every store
fn left_out(url: &str) -> Result<Typed> {
    let store = find(url).map_or("?", |s| s.store);
    let feature = STORES.iter().find(|s| s.0 == store).map_or("?", |s| s.1);
    Err(Error::built_without(&redact_url(url), store, feature))
}

// What names a left-out store's check in the table.
#[cfg(not(feature = "etcd"))]
use self::left_out as check_etcd;
#[cfg(not(feature = "memcached"))]
use self::left_out as check_memcached;
#[cfg(not(feature = "mysql"))]
use self::left_out as check_mysql;
#[cfg(not(feature = "postgres"))]
use self::left_out as check_postgres;
#[cfg(not(feature = "redis"))]
use self::left_out as check_redis;
#[cfg(not(feature = "zookeeper"))]
use self::left_out as check_zookeeper;

/// Every Redis scheme, with the password `REDISCLI_AUTH` gives when the URL has none.
#[cfg(feature = "redis")]
fn check_redis(url: &str) -> Result<Typed> {
    let env_password = std::env::var(crate::env::REDIS_AUTH).ok();
    redis::parse_url(url, env_password).map(Typed::Redis)
}

#[cfg(feature = "etcd")]
fn check_etcd(url: &str) -> Result<Typed> {
    etcd::url::parse(url).map(Typed::Etcd)
}

#[cfg(feature = "memcached")]
fn check_memcached(url: &str) -> Result<Typed> {
    memcached::url::parse(url).map(Typed::Memcached)
}

#[cfg(feature = "zookeeper")]
fn check_zookeeper(url: &str) -> Result<Typed> {
    zookeeper::url::parse(url).map(Typed::Zookeeper)
}

#[cfg(feature = "postgres")]
fn check_postgres(url: &str) -> Result<Typed> {
    postgres::url::parse(url).map(Typed::Postgres)
}

#[cfg(feature = "mysql")]
fn check_mysql(url: &str) -> Result<Typed> {
    mysql::url::parse(url).map(Typed::Mysql)
}

fn check_file(url: &str) -> Result<Typed> {
    match url.strip_prefix("file://") {
        Some("") | None => Err(Error::Usage(
            "file:// needs a directory, e.g. file:///var/tmp/dlock".into(),
        )),
        Some(dir) => Ok(Typed::File(PathBuf::from(dir))),
    }
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
        for (family, _) in QUORUMS {
            assert!(listed(family), "{family}");
        }
        assert_eq!(built_stores()[0], "local");
    }

    #[test]
    fn a_store_left_out_is_named_with_its_feature_never_the_password() {
        let Err(err) = left_out("etcds://u:Secr3t@h:1") else {
            panic!("a left-out store was read")
        };
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
