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
/// The local store's directory when neither `file://DIR` nor `DLOCK_DIR` is given:
/// per host, shared by all users, and kept across reboots so fencing counters never reset.
pub const DEFAULT_DIR: &str = "/var/tmp/dlock";

/// The longest duration any option takes (a century): anything longer is a typo, and
/// refusing it keeps every `Instant + Duration` and millisecond count far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses a duration: humantime (`500ms`, `1h30m`) or a bare number of seconds, as flock does.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    let d = if let Ok(secs) = t.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("invalid duration '{s}'"));
        }
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    } else {
        humantime::parse_duration(t)
            .map_err(|e| format!("invalid duration '{s}': {e} (try 30s, 500ms, 5m)"))?
    };
    if d > MAX_DURATION {
        return Err(format!(
            "duration '{s}' is longer than 100 years (without --timeout, dlock waits forever)"
        ));
    }
    Ok(d)
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
    let tls = match url.split_once("://").map(|(s, _)| s) {
        Some("redis+sentinel") => false,
        Some("rediss+sentinel") => true,
        _ => return Err(bad("the scheme must be redis+sentinel or rediss+sentinel")),
    };
    let hosts = parse_host_list(url, SENTINEL_PORT, "Sentinel").map_err(|why| bad(&why))?;
    let mut segments = hosts.path.split('/').filter(|s| !s.is_empty());
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
        insecure: hosts.insecure,
        nodes: hosts.nodes,
        service,
        db,
        username: hosts.username,
        password: hosts.password,
    })
}

/// The parts of `scheme://[user[:password]@]host[:port][,host[:port]...][/PATH][#insecure]`
/// (a query is ignored), as Sentinel and Cluster URLs share them.
pub(crate) struct HostList {
    pub(crate) nodes: Vec<(String, u16)>,
    /// What follows the hosts' `/`, unparsed.
    pub(crate) path: String,
    pub(crate) insecure: bool,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// Parses the hosts and credentials of `url` (see [`HostList`]); `what` names a host in the
/// reason given when the URL is bad.
pub(crate) fn parse_host_list(
    url: &str,
    default_port: u16,
    what: &str,
) -> std::result::Result<HostList, String> {
    let (_scheme, rest) = url.split_once("://").ok_or("no scheme")?;
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
            let user = percent_decode(user).ok_or("bad escape in the user")?;
            let pass = pass
                .map(|p| percent_decode(p).ok_or("bad escape in the password"))
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
            let (host, after) = v6.split_once(']').ok_or("unclosed '['")?;
            (host, after.strip_prefix(':'))
        } else {
            match node.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (node, None),
            }
        };
        if host.is_empty() {
            return Err(format!("a {what} host is empty"));
        }
        let port = match port {
            None => default_port,
            Some(p) => p.parse().map_err(|_| format!("bad port '{p}'"))?,
        };
        nodes.push((host.to_string(), port));
    }
    if nodes.is_empty() {
        return Err(format!("no {what} host"));
    }
    Ok(HostList {
        nodes,
        path: path.to_string(),
        insecure: fragment == "insecure",
        username,
        password,
    })
}

/// Decodes `%XX` escapes; `None` when one is malformed or the result is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
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
    match std::env::var_os(crate::env::DIR) {
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
        // Past what an Instant can count: refused, never a panic later.
        assert!(parse_duration("500000000000y").is_err());
        assert!(parse_duration("18446744073709551615s").is_err());
        assert!(parse_duration("18446744073709551615").is_err());
        assert!(parse_duration("100years").is_err());
        assert!(parse_duration("99years").is_ok());
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
}
