//! Renewing on a quorum: as many servers as the holder's sharing needs, whatever the store
//! of each server (Redlock, the memcached quorum).
//!
//! A semaphore holder must keep its place on as many servers as it needed to be admitted
//! ([`votes::quorum_for`]), not only on a majority: with 5 servers and `--limit 2`, holders
//! left on {1,2,3} and {3,4,5} fill server 3 alone, and a third holder fits on the other
//! four. So a renewal counts against the holder's own quorum. This process knows it for
//! the holders it acquired (`exec`, [`Modes`]); for another (`dlock renew`), a renewal done
//! on a majority but not everywhere reads the key's sharing from the servers and, for a
//! semaphore, renews again until enough servers have (renewing twice only extends).

use std::future::Future;
use std::time::{Duration, Instant};

use super::modes::Modes;
use super::outcome::{self, Renewals};
use super::votes;
use crate::backend::{KeyStatus, Lease, Sharing};
use crate::error::Result;

/// How long one server may take to answer a renew request: TTL/5, 50 ms to 1 s. A renewal
/// returns as soon as a majority answered, so a dead server does not slow it down.
pub fn renew_timeout(ttl: Duration) -> Duration {
    (ttl / 5).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// A renewal of `owner`'s lease on `key` for `ttl`, on the quorum `name` of `servers`.
pub struct Renewal<'a> {
    pub name: &'a str,
    pub key: &'a str,
    pub owner: &'a str,
    pub ttl: Duration,
    pub servers: usize,
}

/// See the module documentation. `round(needed)` sends one renewal to every server at
/// once and gathers the answers until `needed` renewed or cannot
/// ([`outcome::gather_renewals`]), with when the renewed lease counts from; `status`
/// reads the key's status from the servers.
pub async fn on_quorum<R, RF, S, SF>(
    r: Renewal<'_>,
    modes: &Modes,
    round: R,
    status: S,
) -> Result<Lease>
where
    R: Fn(usize) -> RF,
    RF: Future<Output = (Renewals, Instant)>,
    S: FnOnce() -> SF,
    SF: Future<Output = Result<Vec<KeyStatus>>>,
{
    let n = r.servers;
    let known = modes.get(r.key, r.owner);
    let mut needed = votes::quorum_for(n, known.unwrap_or_default());
    let (mut renewals, mut granted_at) = round(needed).await;
    let done = renewals.renewed.len();
    if known.is_none() && done < n && done >= needed {
        // Renewed on a majority, not everywhere: a semaphore holder may need more.
        let more = votes::quorum_for(n, held_as(status().await));
        if more > needed {
            needed = more;
            (renewals, granted_at) = round(needed).await;
        }
    }
    outcome::renewed(
        r.name,
        (r.key, r.owner),
        (r.ttl, granted_at),
        renewals,
        needed,
    )
}

/// How the holders hold a key, as its status says; exclusive when it cannot be read.
fn held_as(status: Result<Vec<KeyStatus>>) -> Sharing {
    let first = status.ok().and_then(|s| s.into_iter().next());
    first.map_or(Sharing::Exclusive, |s| s.sharing)
}
