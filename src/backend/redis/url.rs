//! Every Redis URL, read once into a typed [`Target`] (checked by the scheme table, then
//! opened from the same reading):
//!
//! * `redis://[user[:password]@]host[:port][/db]`, `rediss://…[#insecure]` (TLS);
//! * `redis+unix:///PATH[?db=N&user=U&pass=P]` (also `unix://`);
//! * `redis+sentinel://[user[:password]@]host[:port][,…]/MASTER[/DB]` (`rediss+sentinel://`);
//! * `redis+cluster://[user[:password]@]host[:port][,…]` (`rediss+cluster://`).
//!
//! Each also takes `?min_replicas=N[&min_replicas_timeout=MS]` (see `replicas.rs`) and
//! `?layout=plain` (see `plain/`), and refuses any other parameter.

use std::path::PathBuf;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use crate::backend::url::{self, Url};
use crate::error::{Error, Result};

/// The port of a Redis server or Cluster node that names none.
pub(super) const REDIS_PORT: u16 = 6379;
/// The Sentinel port when a node names none.
pub const SENTINEL_PORT: u16 = 26379;

/// The parameters every Redis URL takes.
const COMMON: [&str; 3] = ["min_replicas", "min_replicas_timeout", "layout"];

/// Where the locks live in the keyspace (`?layout=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Layout {
    /// dlock's own keys `dlock:{K}:…` with their queue (the default).
    #[default]
    Dlock,
    /// `?layout=plain`: the application's canonical `SET K token NX PX` lock on K itself.
    Plain,
}

/// What a Redis URL names.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) kind: Kind,
    /// `?min_replicas`: replicas that must acknowledge each grant and renewal.
    pub(crate) min_replicas: Option<MinReplicas>,
    /// `?min_replicas` is given, even as 0 (off): refused where it has no meaning.
    pub(crate) names_min_replicas: bool,
    pub(crate) layout: Layout,
}

/// Where the server is.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// One server at one address (TCP, TLS or a Unix socket).
    Direct(ConnectionInfo),
    Sentinel(SentinelTarget),
    /// The listed nodes of one Cluster, credentials set on each.
    Cluster(Vec<ConnectionInfo>),
}

/// A Sentinel URL: the Sentinels, and which master they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    pub tls: bool,
    pub insecure: bool,
    /// The Sentinels, `(host, port)`.
    pub nodes: Vec<(String, u16)>,
    /// The master's name, as in `sentinel monitor NAME ...`.
    pub service: String,
    pub db: i64,
    /// The credentials are for the master.
    pub username: Option<String>,
    pub password: Option<String>,
}

impl Target {
    /// Every password the target carries (to scrub from messages).
    pub(crate) fn secrets(&self) -> Vec<String> {
        let passwords: Vec<Option<&str>> = match &self.kind {
            Kind::Direct(info) => vec![info.redis_settings().password()],
            Kind::Sentinel(s) => vec![s.password.as_deref()],
            Kind::Cluster(nodes) => nodes
                .iter()
                .map(|n| n.redis_settings().password())
                .collect(),
        };
        let mut secrets: Vec<String> = passwords.into_iter().flatten().map(String::from).collect();
        secrets.dedup();
        secrets
    }
}

/// The kind of URL, as its errors name it.
fn kind_name(scheme: &str) -> &'static str {
    if scheme.ends_with("+sentinel") {
        "Sentinel"
    } else if scheme.ends_with("+cluster") {
        "Cluster"
    } else {
        "Redis"
    }
}

fn invalid(url: &str, why: &str) -> Error {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    Error::Usage(format!(
        "invalid {} URL {}: {why}",
        kind_name(scheme),
        url::redact(url)
    ))
}

/// Reads a Redis URL of any kind; when it carries no password, `env_password` (the value
/// of `REDISCLI_AUTH`) is used for the server (Sentinel: the master).
pub(crate) fn parse(url: &str, env_password: Option<String>) -> Result<Target> {
    let parsed = url::parse(url).map_err(|why| invalid(url, &why))?;
    let env_password = env_password.filter(|p| !p.is_empty());
    let read = match parsed.scheme.as_str() {
        "redis" | "rediss" => direct(&parsed, env_password),
        "redis+unix" | "unix" => unix(&parsed, env_password),
        "redis+sentinel" | "rediss+sentinel" => sentinel(&parsed, env_password),
        "redis+cluster" | "rediss+cluster" => cluster(&parsed, env_password),
        _ => Err("not a Redis scheme".to_string()),
    };
    let kind = read.map_err(|why| invalid(url, &why))?;
    let min_replicas = read_min_replicas(&parsed).map_err(|why| invalid(url, &why))?;
    let layout = layout(&parsed).map_err(|why| invalid(url, &why))?;
    if layout == Layout::Plain && min_replicas.is_some() {
        return Err(invalid(url, "layout=plain does not take min_replicas"));
    }
    Ok(Target {
        kind,
        min_replicas,
        names_min_replicas: parsed.param("min_replicas").is_some(),
        layout,
    })
}

/// `?layout=dlock` (the default) or `?layout=plain`.
fn layout(u: &Url) -> std::result::Result<Layout, String> {
    match u.param("layout") {
        None | Some("dlock") => Ok(Layout::Dlock),
        Some("plain") => Ok(Layout::Plain),
        Some(other) => Err(format!(
            "layout={}: expected plain or dlock",
            other.escape_debug()
        )),
    }
}

/// Reads a `redis://`, `rediss://` or `redis+unix://` URL (see [`parse`]).
pub fn connection_info(url: &str, env_password: Option<String>) -> Result<ConnectionInfo> {
    match parse(url, env_password)?.kind {
        Kind::Direct(info) => Ok(info),
        _ => Err(invalid(
            url,
            "expected one server (redis://, rediss://, redis+unix://)",
        )),
    }
}

/// The known parameters of a URL, the replica ones included.
fn known<'a>(own: &[&'a str]) -> Vec<&'a str> {
    own.iter().copied().chain(COMMON).collect()
}

fn direct(u: &Url, env_password: Option<String>) -> std::result::Result<Kind, String> {
    u.only_params(&known(&["protocol"]))?;
    let host = match u.hosts.as_slice() {
        [] => return Err("it names no host".into()),
        [host] => host,
        _ => {
            return Err("it names one server; for a Redlock quorum give each its own redis:// URL, for a Cluster use redis+cluster://".into())
        }
    };
    if matches!(host.name.as_str(), "0.0.0.0" | "::") {
        return Err("cannot connect to a wildcard address (0.0.0.0 or ::)".into());
    }
    let port = host.port.unwrap_or(REDIS_PORT);
    let addr = if u.scheme == "rediss" {
        ConnectionAddr::TcpTls {
            host: host.name.clone(),
            port,
            insecure: insecure(u)?,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.name.clone(), port)
    };
    let db = match u.segments()?.as_slice() {
        [] => 0,
        [db] => database(db)?,
        _ => return Err("expected at most /DB after the host".into()),
    };
    let password = u.password.clone().filter(|p| !p.is_empty());
    info(addr, u, db, u.user.clone(), password.or(env_password)).map(Kind::Direct)
}

fn unix(u: &Url, env_password: Option<String>) -> std::result::Result<Kind, String> {
    u.only_params(&known(&["db", "user", "pass", "protocol"]))?;
    if !u.hosts.is_empty() || u.password.is_some() || u.user.is_some() {
        return Err("give the socket's path after three slashes: redis+unix:///PATH (user and password as ?user=U&pass=P)".into());
    }
    let path = url::percent_decode(&u.path).ok_or("bad escape in the path")?;
    if path.is_empty() || path == "/" {
        return Err("it names no socket path".into());
    }
    let db = u.param("db").map(database).transpose()?.unwrap_or(0);
    let user = u.param("user").map(String::from).filter(|s| !s.is_empty());
    let password = u.param("pass").map(String::from).filter(|p| !p.is_empty());
    let addr = ConnectionAddr::Unix(PathBuf::from(path));
    info(addr, u, db, user, password.or(env_password)).map(Kind::Direct)
}

/// The settings of one server, without the `CLIENT SETINFO` round trip on connecting
/// (servers before 7.2 reject it, and it costs a round trip of its own).
fn info(
    addr: ConnectionAddr,
    u: &Url,
    db: i64,
    user: Option<String>,
    password: Option<String>,
) -> std::result::Result<ConnectionInfo, String> {
    let info = addr.into_connection_info().map_err(|e| e.to_string())?;
    let mut settings = info
        .redis_settings()
        .clone()
        .set_skip_set_lib_name()
        .set_db(db)
        .set_protocol(protocol(u)?);
    if let Some(user) = user {
        settings = settings.set_username(user);
    }
    if let Some(password) = password {
        settings = settings.set_password(password);
    }
    Ok(info.set_redis_settings(settings))
}

fn protocol(u: &Url) -> std::result::Result<ProtocolVersion, String> {
    match u.param("protocol") {
        None | Some("2" | "resp2") => Ok(ProtocolVersion::RESP2),
        Some("3" | "resp3") => Ok(ProtocolVersion::RESP3),
        Some(_) => Err("protocol must be resp2 or resp3".into()),
    }
}

fn database(db: &str) -> std::result::Result<i64, String> {
    db.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("bad database '{}'", db.escape_debug()))
}

/// `#insecure` skips the certificate check; no other fragment means anything.
fn insecure(u: &Url) -> std::result::Result<bool, String> {
    match u.fragment.as_deref() {
        None | Some("") => Ok(false),
        Some("insecure") => Ok(true),
        Some(_) => Err("only #insecure is supported as a fragment".into()),
    }
}

fn sentinel(u: &Url, env_password: Option<String>) -> std::result::Result<Kind, String> {
    u.only_params(&COMMON)?;
    let nodes = nodes(u, SENTINEL_PORT, "Sentinel")?;
    let segments = u.segments()?;
    let (service, db) = match segments.as_slice() {
        [] => return Err("no master name (redis+sentinel://HOST:PORT/MASTER)".into()),
        [service] => (service, 0),
        [service, db] => (service, database(db)?),
        _ => return Err("expected /MASTER or /MASTER/DB after the hosts".into()),
    };
    if service.contains(',') || service.chars().any(char::is_control) {
        return Err(format!("bad master name '{}'", service.escape_debug()));
    }
    let tls = u.scheme == "rediss+sentinel";
    Ok(Kind::Sentinel(SentinelTarget {
        tls,
        insecure: tls && insecure(u)?,
        nodes,
        service: service.clone(),
        db,
        username: u.user.clone(),
        password: u
            .password
            .clone()
            .filter(|p| !p.is_empty())
            .or(env_password),
    }))
}

fn nodes(u: &Url, port: u16, what: &str) -> std::result::Result<Vec<(String, u16)>, String> {
    if u.hosts.is_empty() {
        return Err(format!("no {what} host"));
    }
    Ok(u.hosts
        .iter()
        .map(|h| (h.name.clone(), h.port.unwrap_or(port)))
        .collect())
}

fn cluster(u: &Url, env_password: Option<String>) -> std::result::Result<Kind, String> {
    u.only_params(&COMMON)?;
    if !matches!(u.path.trim_matches('/'), "" | "0") {
        return Err("a Cluster has one database, 0: nothing may follow the hosts".into());
    }
    let tls = u.scheme == "rediss+cluster";
    let insecure = tls && insecure(u)?;
    let password = u
        .password
        .clone()
        .filter(|p| !p.is_empty())
        .or(env_password);
    let mut infos = Vec::new();
    for (host, port) in nodes(u, REDIS_PORT, "Cluster")? {
        let addr = if tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        infos.push(info(addr, u, 0, u.user.clone(), password.clone())?);
    }
    Ok(Kind::Cluster(infos))
}

/// More replicas than this is a typo, not a topology.
const MAX_REPLICAS: u32 = 100;
/// A longer explicit `WAIT` would outlast any renewal schedule worth having.
const MAX_TIMEOUT_MS: u64 = 60_000;
/// Without `min_replicas_timeout`, `WAIT` waits a tenth of the TTL, within these bounds
/// (milliseconds): a renewal must leave room for retries before the command is killed.
const DEFAULT_TIMEOUT_MS: (u64, u64) = (10, 1_000);

/// How many replicas must acknowledge, and for how long `WAIT` may wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MinReplicas {
    pub(crate) count: u32,
    /// `None`: a tenth of the TTL (see [`DEFAULT_TIMEOUT_MS`]).
    pub(crate) timeout: Option<Duration>,
}

impl MinReplicas {
    /// How long `WAIT` waits for a lease of `ttl`.
    pub(crate) fn timeout_for(&self, ttl: Duration) -> Duration {
        self.timeout.unwrap_or_else(|| {
            let (lo, hi) = DEFAULT_TIMEOUT_MS;
            (ttl / 10).clamp(Duration::from_millis(lo), Duration::from_millis(hi))
        })
    }
}

/// The `min_replicas` of a Redis URL: `None` when absent or 0 (off). The reason of a bad
/// value is for a usage error (exit 2).
pub(crate) fn read_min_replicas(u: &Url) -> std::result::Result<Option<MinReplicas>, String> {
    let number = |name: &str, max: u64| -> std::result::Result<Option<u64>, String> {
        let Some(value) = u.param(name) else {
            return Ok(None);
        };
        let n = value.parse::<u64>().ok().filter(|n| *n <= max);
        n.map(Some).ok_or_else(|| {
            format!(
                "{name}={}: expected a whole number from 0 to {max}",
                value.escape_debug()
            )
        })
    };
    let count = number("min_replicas", MAX_REPLICAS.into())?;
    let timeout = match number("min_replicas_timeout", MAX_TIMEOUT_MS)? {
        Some(0) => return Err(format!("min_replicas_timeout=0: WAIT would block forever; give milliseconds from 1 to {MAX_TIMEOUT_MS}")),
        ms => ms.map(Duration::from_millis),
    };
    match (count, timeout) {
        (None, Some(_)) => Err("min_replicas_timeout needs min_replicas=N".into()),
        (None | Some(0), _) => Ok(None),
        (Some(count), timeout) => Ok(Some(MinReplicas {
            count: count as u32,
            timeout,
        })),
    }
}

#[cfg(test)]
mod tests;
