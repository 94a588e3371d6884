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
    /// One Redis server (`redis://` or `rediss://`).
    Redis(String),
    /// Several independent Redis servers: Redlock quorum.
    Redlock(Vec<String>),
}

impl BackendSpec {
    /// Reads the URLs given on the command line (each may hold a comma-separated list).
    pub fn from_urls(urls: &[String]) -> Result<BackendSpec> {
        let urls: Vec<String> = urls
            .iter()
            .flat_map(|u| u.split(','))
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect();
        match urls.as_slice() {
            [] => Ok(BackendSpec::Local(default_dir())),
            [one] => Self::single(one),
            many => {
                for u in many {
                    if !is_redis(u) {
                        return Err(Error::Usage(format!(
                            "several URLs make a Redlock quorum, which needs redis:// or rediss:// URLs, not {}",
                            redact_url(u)
                        )));
                    }
                }
                Ok(BackendSpec::Redlock(many.to_vec()))
            }
        }
    }

    fn single(url: &str) -> Result<BackendSpec> {
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
            "unsupported backend URL {} (scheme '{scheme}'; supported: redis://, rediss://, file://DIR)",
            redact_url(url)
        )))
    }
}

fn is_redis(url: &str) -> bool {
    url.starts_with("redis://") || url.starts_with("rediss://")
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
        let file = vec!["file:///tmp/x".to_string()];
        assert_eq!(
            BackendSpec::from_urls(&file).unwrap(),
            BackendSpec::Local("/tmp/x".into())
        );
        assert!(BackendSpec::from_urls(&["etcd://x".to_string()]).is_err());
    }
}
