//! The time limits memcached imposes on a lease.
//!
//! * A TTL is a whole number of seconds, counted on a clock that ticks once a second: an
//!   item may expire up to one second before its TTL has passed. A lease is therefore
//!   taken as granted one second before its request was sent, so that its validity is
//!   TTL − 1 s; a TTL under three seconds would leave too little to renew in.
//! * A TTL above 30 days is read by the server as an absolute Unix time (an item that
//!   expires at once, in 1970): such a TTL is refused, never sent.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The shortest TTL: two seconds of validity.
pub const MIN_TTL: Duration = Duration::from_secs(3);
/// The longest TTL memcached reads as relative: 30 days.
pub const MAX_SECS: u64 = 30 * 24 * 3600;
/// How early an item may expire.
pub const EARLY: Duration = Duration::from_secs(1);

/// The TTL to send for a lease of `ttl`, in seconds (rounded up), or why it cannot be.
pub fn seconds(ttl: Duration, key: &str, backend: &str) -> Result<u64> {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    if ttl < MIN_TTL {
        return Err(Error::Usage(format!(
            "--ttl {} is too short for lock '{key}' on {backend}: memcached counts TTLs in whole seconds and may expire an item up to 1s early, so the shortest lease is {}",
            humantime::format_duration(ttl),
            humantime::format_duration(MIN_TTL)
        )));
    }
    if secs > MAX_SECS {
        return Err(Error::Usage(format!(
            "--ttl {} is too long for lock '{key}' on {backend}: memcached reads a TTL above 30 days as a date, so the longest lease is 30d",
            humantime::format_duration(ttl)
        )));
    }
    Ok(secs)
}

/// When a lease whose request was sent at `sent` counts as granted: one second earlier,
/// as the server's clock may be that far behind.
pub fn granted_at(sent: Instant) -> Instant {
    sent.checked_sub(EARLY).unwrap_or(sent)
}

/// The TTL of run records, clamped to what memcached reads as relative.
pub fn clamp_secs(ttl: Duration) -> u64 {
    ttl.as_secs().clamp(1, MAX_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(seconds(Duration::from_secs(3), "k", "m").unwrap(), 3);
        assert_eq!(seconds(Duration::from_millis(3500), "k", "m").unwrap(), 4);
        assert_eq!(
            seconds(Duration::from_secs(MAX_SECS), "k", "m").unwrap(),
            MAX_SECS
        );
        for bad in [
            Duration::from_millis(2999),
            Duration::from_secs(MAX_SECS) + Duration::from_millis(1),
        ] {
            let e = seconds(bad, "k", "memcached://h:1").unwrap_err();
            assert_eq!(e.exit_code(), 2);
            let msg = e.to_string();
            assert!(
                msg.contains("'k'") && msg.contains("memcached://h:1"),
                "{msg}"
            );
        }
        assert_eq!(clamp_secs(crate::backend::RUN_RECORD_TTL), MAX_SECS);
    }
}
