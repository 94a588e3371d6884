//! Lease arithmetic: when to renew, and when a child must be dead because the lease may
//! be about to expire on the server.
//!
//! All instants are monotonic and measured from when a granting request was *sent*: the
//! server started the TTL no earlier than that, so `sent_at + ttl` is a safe upper bound on
//! the server-side expiry, whatever the network delay. A small allowance for clock-rate
//! drift between us and the server is subtracted on top (as in the Redlock algorithm).

use std::time::{Duration, Instant};

/// Clock drift allowance for a lease of `ttl`: 1% plus 2 ms, as the Redlock spec suggests.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The latest instant at which a lease granted by a request sent at `sent_at` is surely
/// still valid on the server.
pub fn valid_until(sent_at: Instant, ttl: Duration) -> Instant {
    sent_at + ttl.saturating_sub(drift(ttl))
}

/// When to renew and when to give up, for one lease length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Renew this long after the last successful renewal was sent (TTL/3).
    pub renew_every: Duration,
    /// After a failed renewal, try again this often.
    pub retry_every: Duration,
    /// SIGKILL the child this long before the lease may expire.
    pub kill_margin: Duration,
    /// SIGTERM the child this long before the SIGKILL.
    pub grace: Duration,
}

impl Schedule {
    /// The schedule for a lease of `ttl`.
    pub fn for_ttl(ttl: Duration) -> Schedule {
        let clamp = |d: Duration, lo: u64, hi: u64| {
            d.clamp(Duration::from_millis(lo), Duration::from_millis(hi))
        };
        Schedule {
            renew_every: ttl / 3,
            retry_every: clamp(ttl / 20, 10, 1_000),
            kill_margin: clamp(ttl / 20, 10, 1_000),
            grace: clamp(ttl / 6, 10, 10_000),
        }
    }

    /// When the child gets SIGKILL if no renewal succeeds after one sent at `sent_at`.
    pub fn kill_at(&self, sent_at: Instant, ttl: Duration) -> Instant {
        valid_until(sent_at, ttl) - self.kill_margin
    }

    /// When the child gets SIGTERM if no renewal succeeds after one sent at `sent_at`.
    pub fn term_at(&self, sent_at: Instant, ttl: Duration) -> Instant {
        self.kill_at(sent_at, ttl) - self.grace
    }

    /// How long one renewal request may take before it counts as failed: it must leave
    /// room for a retry before the SIGTERM.
    pub fn request_timeout(&self) -> Duration {
        self.renew_every.min(Duration::from_secs(5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_dies_before_expiry() {
        for ms in [100u64, 300, 1_000, 30_000, 3_600_000] {
            let ttl = Duration::from_millis(ms);
            let s = Schedule::for_ttl(ttl);
            let t0 = Instant::now();
            let expiry = t0 + ttl;
            assert!(s.kill_at(t0, ttl) < expiry, "ttl {ms}");
            assert!(s.term_at(t0, ttl) < s.kill_at(t0, ttl), "ttl {ms}");
            // The first renewal happens well before the SIGTERM.
            assert!(t0 + s.renew_every < s.term_at(t0, ttl), "ttl {ms}");
            // Then at least one retry fits before the SIGTERM.
            assert!(
                t0 + s.renew_every + s.retry_every < s.term_at(t0, ttl),
                "ttl {ms}"
            );
        }
    }

    #[test]
    fn thirty_seconds() {
        let s = Schedule::for_ttl(Duration::from_secs(30));
        assert_eq!(s.renew_every, Duration::from_secs(10));
        assert_eq!(s.grace, Duration::from_secs(5));
        assert_eq!(s.kill_margin, Duration::from_secs(1));
    }
}
