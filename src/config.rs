//! Turning command-line values into checked settings: durations, keys, backend URLs.
//!
//! Everything here is pure so that bad input is rejected before any backend is touched
//! (exit 2, nothing held).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// The shortest lease we accept: below this, renewal every TTL/3 cannot keep up with a
/// loaded machine and the child would be killed for no reason.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// The longest lease we accept (a year); anything longer is surely a typo.
pub const MAX_TTL: Duration = Duration::from_secs(366 * 24 * 3600);
/// Longest key, in bytes. Keys end up in file names and Redis key names.
pub const MAX_KEY_LEN: usize = 512;
/// Environment variable naming the local store's directory.
pub const DIR_ENV: &str = "DLOCK_DIR";
/// The environment variables through which a caller's setting or an enclosing lease reaches
/// `dlock` (`exec` sets the lease ones for its command). Harnesses that run `dlock` clear
/// them, so that whatever the caller's shell holds cannot leak into a measurement or a test.
pub const INHERITED_ENV: [&str; 8] = [
    "DLOCK_URL",
    crate::credentials::URL_FD_ENV,
    crate::cmd::acquire::OWNER_ENV,
    crate::cmd::acquire::OWNERS_ENV,
    "DLOCK_KEY",
    "DLOCK_FENCING_TOKEN",
    DIR_ENV,
    crate::backend::redis::AUTH_ENV,
];
/// The local store's directory when neither `file://DIR` nor `DLOCK_DIR` is given:
/// per host, shared by all users, and kept across reboots so fencing counters never reset.
pub const DEFAULT_DIR: &str = "/var/tmp/dlock";

/// Parses a duration: humantime (`500ms`, `1h30m`) or a bare number of seconds, as flock does.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = t.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 || secs > MAX_TTL.as_secs_f64() * 10.0 {
            return Err(format!("invalid duration '{s}'"));
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("invalid duration '{s}': {e} (try 30s, 500ms, 5m)"))
}

/// Checks a lease length is within [`MIN_TTL`, `MAX_TTL`].
pub fn check_ttl(ttl: Duration) -> Result<Duration> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::Usage(format!(
            "--ttl {} is out of range ({} to {})",
            humantime::format_duration(ttl),
            humantime::format_duration(MIN_TTL),
            humantime::format_duration(MAX_TTL)
        )));
    }
    Ok(ttl)
}

/// Checks a lock key: non-empty, not too long, no control characters.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::Usage("the lock key must not be empty".into()));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::Usage(format!(
            "the lock key is longer than {MAX_KEY_LEN} bytes"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::Usage(format!(
            "the lock key {key:?} contains control characters"
        )));
    }
    Ok(())
}

/// Which backend to talk to, decided from `--url`/`DLOCK_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSpec {
    /// The embedded local store in this directory.
    Local(PathBuf),
    /// One Redis server (`redis://`, `rediss://`, `redis+unix:///PATH` for a Unix socket,
    /// or the master Sentinels name with `redis+sentinel://`, `rediss+sentinel://`).
    Redis(String),
    /// Several independent Redis servers (each of the kinds above): Redlock quorum.
    Redlock(Vec<String>),
}

impl BackendSpec {
    /// Reads the URLs given on the command line (each may hold a comma-separated list).
    /// A piece without `://` continues the host list of the Sentinel URL before it
    /// (`redis+sentinel://h1:26379,h2:26379/mymaster`).
    pub fn from_urls(urls: &[String]) -> Result<BackendSpec> {
        let mut joined: Vec<String> = Vec::new();
        for piece in urls.iter().flat_map(|u| u.split(',')).map(str::trim) {
            if piece.is_empty() {
                continue;
            }
            match joined.last_mut() {
                Some(last) if !piece.contains("://") && sentinel_hosts_open(last) => {
                    last.push(',');
                    last.push_str(piece);
                }
                _ => joined.push(piece.to_string()),
            }
        }
        match joined.as_slice() {
            [] => Ok(BackendSpec::Local(default_dir())),
            [one] => Self::single(one),
            many => {
                for u in many {
                    if !is_redis(u) {
                        return Err(Error::Usage(format!(
                            "several URLs make a Redlock quorum, which needs Redis URLs (redis://, rediss://, redis+unix://, redis+sentinel://), not {}",
                            redact_url(u)
                        )));
                    }
                    if is_sentinel_url(u) {
                        parse_sentinel_url(u)?;
                    }
                }
                for (i, u) in many.iter().enumerate() {
                    if many[..i].contains(u) {
                        return Err(Error::Usage(format!(
                            "{} is given twice: a Redlock quorum needs independent servers",
                            redact_url(u)
                        )));
                    }
                }
                Ok(BackendSpec::Redlock(many.to_vec()))
            }
        }
    }

    fn single(url: &str) -> Result<BackendSpec> {
        if is_sentinel_url(url) {
            parse_sentinel_url(url)?;
        }
        if is_redis(url) {
            return Ok(BackendSpec::Redis(url.to_string()));
        }
        if let Some(path) = url.strip_prefix("file://") {
            if path.is_empty() {
                return Err(Error::Usage(
                    "file:// needs a directory, e.g. file:///var/tmp/dlock".into(),
                ));
            }
            return Ok(BackendSpec::Local(PathBuf::from(path)));
        }
        let scheme = url.split("://").next().unwrap_or(url);
        Err(Error::Usage(format!(
            "unsupported backend URL {} (scheme '{scheme}'; supported: redis://, rediss://, redis+unix:///PATH, redis+sentinel://, rediss+sentinel://, file://DIR)",
            redact_url(url)
        )))
    }
}

fn is_redis(url: &str) -> bool {
    url.starts_with("redis://")
        || url.starts_with("rediss://")
        || is_unix_url(url)
        || is_sentinel_url(url)
}

/// True for a Redis server on a Unix socket: `redis+unix:///PATH` (or `unix:///PATH`),
/// with `?db=N&user=U&pass=P` as the Redis client reads them.
fn is_unix_url(url: &str) -> bool {
    url.starts_with("redis+unix://") || url.starts_with("unix://")
}

/// True for a Sentinel URL still in its host list (no `/MASTER` yet).
fn sentinel_hosts_open(url: &str) -> bool {
    is_sentinel_url(url)
        && url
            .split_once("://")
            .is_some_and(|(_, rest)| !rest.contains('/'))
}

/// True for `redis+sentinel://` and `rediss+sentinel://` URLs.
pub fn is_sentinel_url(url: &str) -> bool {
    url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://")
}

/// The Sentinel port when a node names none.
pub const SENTINEL_PORT: u16 = 26379;

/// A parsed `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/MASTER[/DB]`
/// (`rediss+sentinel://` for TLS to the Sentinels and the master; `#insecure` skips the
/// certificate check, as for `rediss://`). The credentials are for the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    pub tls: bool,
    pub insecure: bool,
    /// The Sentinels, `(host, port)`.
    pub nodes: Vec<(String, u16)>,
    /// The master's name, as in `sentinel monitor NAME ...`.
    pub service: String,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<String>,
}

/// Parses a Sentinel URL (see [`SentinelUrl`]).
pub fn parse_sentinel_url(url: &str) -> Result<SentinelUrl> {
    let bad = |why: &str| Error::Usage(format!("invalid Sentinel URL {}: {why}", redact_url(url)));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let tls = match scheme {
        "redis+sentinel" => false,
        "rediss+sentinel" => true,
        _ => return Err(bad("the scheme must be redis+sentinel or rediss+sentinel")),
    };
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let rest = rest.split_once('?').map_or(rest, |(r, _query)| r);
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => {
            let (user, pass) = match u.split_once(':') {
                Some((user, pass)) => (user, Some(pass)),
                None => (u, None),
            };
            let user = percent_decode(user).ok_or_else(|| bad("bad escape in the user"))?;
            let pass = pass
                .map(|p| percent_decode(p).ok_or_else(|| bad("bad escape in the password")))
                .transpose()?;
            (
                Some(user).filter(|u| !u.is_empty()),
                pass.filter(|p| !p.is_empty()),
            )
        }
    };
    let mut nodes = Vec::new();
    for node in hosts.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let (host, port) = if let Some(v6) = node.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            (host, after.strip_prefix(':'))
        } else {
            match node.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (node, None),
            }
        };
        if host.is_empty() {
            return Err(bad("a Sentinel host is empty"));
        }
        let port = match port {
            None => SENTINEL_PORT,
            Some(p) => p.parse().map_err(|_| bad(&format!("bad port '{p}'")))?,
        };
        nodes.push((host.to_string(), port));
    }
    if nodes.is_empty() {
        return Err(bad("no Sentinel host"));
    }
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let service = segments
        .next()
        .ok_or_else(|| bad("no master name (redis+sentinel://HOST:PORT/MASTER)"))?;
    let service = percent_decode(service).ok_or_else(|| bad("bad escape in the master name"))?;
    let db = match segments.next() {
        None => 0,
        Some(d) => d.parse().map_err(|_| bad(&format!("bad database '{d}'")))?,
    };
    if segments.next().is_some() {
        return Err(bad("expected /MASTER or /MASTER/DB after the hosts"));
    }
    Ok(SentinelUrl {
        tls,
        insecure: fragment == "insecure",
        nodes,
        service,
        db,
        username,
        password,
    })
}

/// Decodes `%XX` escapes; `None` when one is malformed or the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The local store's directory: `DLOCK_DIR` or [`DEFAULT_DIR`].
pub fn default_dir() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_DIR),
    }
}

/// A URL with any password replaced by `***`, safe for errors, logs and `status`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // A Unix-socket URL carries its password in the query (`?pass=P`). The query starts
    // after the credentials (which may hold an unescaped '?' of their own), and an '@' in
    // the path or the query is not theirs.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let creds_end = rest[..authority_end].rfind('@').map_or(0, |i| i + 1);
    if let Some(q) = rest[creds_end..].find('?') {
        let (base, query) = rest.split_at(creds_end + q);
        let pairs: Vec<String> = query[1..].split('&').map(redact_query_pair).collect();
        return format!(
            "{}?{}",
            redact_url(&format!("{scheme}://{base}")),
            pairs.join("&")
        );
    }
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_string();
    };
    let user = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None if userinfo.is_empty() => String::new(),
        None => format!("{userinfo}:***"),
    };
    format!("{scheme}://{user}@{host}{tail}")
}

/// `pass=P` (or `password=P`) becomes `pass=***`; any other query pair stays.
fn redact_query_pair(pair: &str) -> String {
    match pair.split_once('=') {
        Some((k, _)) if k == "pass" || k == "password" => format!("{k}=***"),
        _ => pair.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("1e300").is_err());
    }

    #[test]
    fn ttl_bounds() {
        assert!(check_ttl(Duration::from_millis(99)).is_err());
        assert!(check_ttl(Duration::from_secs(30)).is_ok());
        assert!(check_ttl(MAX_TTL + Duration::from_secs(1)).is_err());
    }

    #[test]
    fn keys() {
        assert!(check_key("").is_err());
        assert!(check_key("a\nb").is_err());
        assert!(check_key(&"x".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(check_key("deploy/prod {eu}").is_ok());
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url("redis://:secret@h:6379/0"),
            "redis://:***@h:6379/0"
        );
        assert_eq!(redact_url("redis://u:secret@h"), "redis://u:***@h");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("rediss://tok@h"), "rediss://tok:***@h");
        assert_eq!(redact_url("redis://u:p@ss@h/1"), "redis://u:***@h/1");
        assert_eq!(
            redact_url("redis+unix:///run/r.sock?db=1&pass=secret&user=u"),
            "redis+unix:///run/r.sock?db=1&pass=***&user=u"
        );
        assert_eq!(
            redact_url("redis://:secret@h/0?password=other"),
            "redis://:***@h/0?password=***"
        );
        assert_eq!(redact_url("redis://u:p?ss@h/0"), "redis://u:***@h/0");
        assert_eq!(
            redact_url("redis+unix:///r.sock?pass=a@b&db=1"),
            "redis+unix:///r.sock?pass=***&db=1"
        );
    }

    #[test]
    fn specs() {
        let one = vec!["redis://a".to_string()];
        assert_eq!(
            BackendSpec::from_urls(&one).unwrap(),
            BackendSpec::Redis("redis://a".into())
        );
        let many = vec!["redis://a,redis://b".to_string(), "redis://c".to_string()];
        assert!(
            matches!(BackendSpec::from_urls(&many).unwrap(), BackendSpec::Redlock(v) if v.len() == 3)
        );
        let unix = vec!["redis+unix:///run/redis.sock?db=2".to_string()];
        assert_eq!(
            BackendSpec::from_urls(&unix).unwrap(),
            BackendSpec::Redis("redis+unix:///run/redis.sock?db=2".into())
        );
        let file = vec!["file:///tmp/x".to_string()];
        assert_eq!(
            BackendSpec::from_urls(&file).unwrap(),
            BackendSpec::Local("/tmp/x".into())
        );
        assert!(BackendSpec::from_urls(&["etcd://x".to_string()]).is_err());
        // The same server twice is not a quorum of independent servers.
        let twice = vec![
            "redis://a:1,redis://b:1".to_string(),
            "redis://a:1".to_string(),
        ];
        assert!(BackendSpec::from_urls(&twice).is_err());
        // Redlock members must all be Redis.
        let mixed = vec!["redis://a".to_string(), "file:///tmp/x".to_string()];
        assert!(BackendSpec::from_urls(&mixed).is_err());
    }

    #[test]
    fn sentinel_urls() {
        let u =
            parse_sentinel_url("redis+sentinel://:p%40ss@s1:26380,s2,[::1]:5/mymaster/2").unwrap();
        assert!(!u.tls && !u.insecure);
        assert_eq!(
            u.nodes,
            vec![
                ("s1".to_string(), 26380),
                ("s2".to_string(), SENTINEL_PORT),
                ("::1".to_string(), 5)
            ]
        );
        assert_eq!(u.service, "mymaster");
        assert_eq!(u.db, 2);
        assert_eq!(u.username, None);
        assert_eq!(u.password.as_deref(), Some("p@ss"));

        let u = parse_sentinel_url("rediss+sentinel://app:pw@s1/m#insecure").unwrap();
        assert!(u.tls && u.insecure);
        assert_eq!(u.username.as_deref(), Some("app"));
        assert_eq!(u.db, 0);

        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+sentinel:///m",
            "redis+sentinel://s1:port/m",
            "redis+sentinel://s1/m/notadb",
            "redis+sentinel://s1/m/1/x",
        ] {
            let e = parse_sentinel_url(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        }
        let e = parse_sentinel_url("redis+sentinel://:secret@s1:x/m").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn sentinel_specs() {
        // Clap and DLOCK_URL split on commas: the host list is put back together.
        let split: Vec<String> = ["redis+sentinel://:pw@s1:26379", "s2:26379/mymaster"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            BackendSpec::from_urls(&split).unwrap(),
            BackendSpec::Redis("redis+sentinel://:pw@s1:26379,s2:26379/mymaster".into())
        );
        // Two Sentinel-managed masters (and a plain server) make a Redlock quorum.
        let quorum = vec![
            "redis+sentinel://s1,s2/a,redis+sentinel://s1,s2/b".to_string(),
            "redis://c".to_string(),
        ];
        match BackendSpec::from_urls(&quorum).unwrap() {
            BackendSpec::Redlock(urls) => assert_eq!(
                urls,
                [
                    "redis+sentinel://s1,s2/a",
                    "redis+sentinel://s1,s2/b",
                    "redis://c"
                ]
            ),
            other => panic!("{other:?}"),
        }
        assert!(BackendSpec::from_urls(&["redis+sentinel://s1:1".to_string()]).is_err());
        // Nothing is appended to a Sentinel URL that has its master name already.
        let e = BackendSpec::from_urls(&["redis+sentinel://s1/m,junk".to_string()]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        // A bare host after a plain redis:// URL is still an error.
        let e = BackendSpec::from_urls(&["redis://a,b:1".to_string()]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }
}
