//! Turning command-line values into checked settings: durations, keys, the local store's
//! directory. Backend URLs are read by [`crate::backend::url`].
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

/// The local store's directory: `DLOCK_DIR` or [`DEFAULT_DIR`].
pub fn default_dir() -> PathBuf {
    match std::env::var_os(crate::env::DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_DIR),
    }
}

/// A URL as it may be shown in errors, logs and `status`: see [`crate::backend::url::redact`].
pub fn redact_url(url: &str) -> String {
    crate::backend::url::redact(url)
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
}
