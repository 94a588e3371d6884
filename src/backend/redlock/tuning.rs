//! The timing knobs of a Redlock quorum, and how long each server may take to answer.

use std::time::Duration;

pub use crate::backend::quorum::renew::renew_timeout;
use crate::backend::redis::Tuning;

/// Timing knobs of the quorum. The defaults suit production; tests shrink them.
#[derive(Debug, Clone, Copy)]
pub struct RedlockTuning {
    /// Each server's timing: `connect_timeout` when connecting, `op_timeout` for one release,
    /// status or subscribe request, `heartbeat` as the longest sleep of a waiter without news.
    pub server: Tuning,
    /// Longest random delay before the retry that follows a release message.
    pub jitter: Duration,
    /// Longest back-off of a waiter that lost races or got no answer in time.
    pub max_backoff: Duration,
    /// A waiter without a deadline gives up (`Unavailable`) when no majority has answered
    /// in time (frozen, not just busy), or a majority was down, for this long.
    pub stall: Duration,
    /// A server that could not be reached is tried again at most this often.
    pub reconnect_every: Duration,
}

impl Default for RedlockTuning {
    fn default() -> RedlockTuning {
        RedlockTuning {
            server: Tuning {
                connect_timeout: Duration::from_secs(2),
                op_timeout: Duration::from_secs(1),
                heartbeat: Duration::from_secs(1),
                liveness: Duration::from_secs(4),
                exclusive: false,
            },
            jitter: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
            stall: crate::backend::waiting::RIDE_OUT,
            reconnect_every: Duration::from_secs(1),
        }
    }
}

/// How long one server may take to answer an acquire request for a lease of `ttl`:
/// TTL/10, at least 50 ms (a loaded host or a remote server), at most 200 ms (a dead server
/// must not eat the lease).
pub fn acquire_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(50), Duration::from_millis(200))
}

/// The longest a waiter gives a server that answered too slowly: twice as long after each
/// such round, up to TTL/5 (as a renewal), and less than `op_timeout`, the server's own
/// request timeout. The validity counts the time taken, so a slow answer only shortens it.
pub fn max_acquire_timeout(ttl: Duration, op_timeout: Duration) -> Duration {
    renew_timeout(ttl)
        .min(op_timeout / 2)
        .max(acquire_timeout(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::drift;

    #[test]
    fn timeouts_leave_most_of_the_lease() {
        let ms = Duration::from_millis;
        assert_eq!(acquire_timeout(ms(100)), ms(50));
        assert_eq!(acquire_timeout(ms(1_000)), ms(100));
        assert_eq!(acquire_timeout(Duration::from_secs(30)), ms(200));
        for ttl in [100u64, 300, 1_000, 30_000] {
            let ttl = ms(ttl);
            assert!(acquire_timeout(ttl) + drift(ttl) < ttl, "{ttl:?}");
            assert!(renew_timeout(ttl) <= ttl / 2, "{ttl:?}");
        }
    }
}
