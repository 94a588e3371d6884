//! Renewing on a quorum: as many servers as the holder's sharing needs.
//!
//! A semaphore holder must keep its place on as many servers as it needed to be admitted
//! ([`votes::quorum_for`]), not only on a majority: with 5 servers and `--limit 2`, holders
//! left on {1,2,3} and {3,4,5} fill server 3 alone, and a third holder fits on the other
//! four. So a renewal counts against the holder's own quorum. This process knows it for
//! the holders it acquired (`exec`); for another (`dlock renew`), a renewal done on a
//! majority but not everywhere reads the key's sharing from the servers and, for a
//! semaphore, renews again until enough servers have (renewing twice only extends).

use std::time::{Duration, Instant};

use super::{renew_timeout, RedlockBackend};
use crate::backend::quorum::outcome;
use crate::backend::quorum::votes;
use crate::backend::{Backend, Lease, Sharing};
use crate::error::Result;

impl RedlockBackend {
    /// See the module documentation.
    pub(super) async fn renew_on_quorum(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        let n = self.members.len();
        let known = self.modes.get(key, owner);
        let mut needed = known.map_or(self.quorum, |s| votes::quorum_for(n, s));
        let (mut renewals, mut sent_at) = self.renew_round(key, owner, ttl, needed).await;
        if known.is_none() && renewals.renewed.len() < n && renewals.renewed.len() >= needed {
            // Renewed on a majority, not everywhere: a semaphore holder may need more.
            let more = self.needed_by_holders(key).await;
            if more > needed {
                needed = more;
                (renewals, sent_at) = self.renew_round(key, owner, ttl, needed).await;
            }
        }
        outcome::renewed(&self.name, (key, owner), (ttl, sent_at), renewals, needed)
    }

    /// One renewal sent to every server at once, gathered until `needed` renewed or
    /// cannot; with when it was sent.
    async fn renew_round(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        needed: usize,
    ) -> (outcome::Renewals, Instant) {
        let limit = renew_timeout(ttl);
        let what = format!("cannot renew lock '{key}'");
        let sent_at = Instant::now();
        let calls = self
            .members
            .iter()
            .map(|m| {
                m.call(
                    &what,
                    limit,
                    |b| async move { b.renew(key, owner, ttl).await },
                )
            })
            .collect();
        (outcome::gather_renewals(calls, needed).await, sent_at)
    }

    /// How many servers the holders of `key` need, as the servers say how they hold it;
    /// a majority when that cannot be read.
    async fn needed_by_holders(&self, key: &str) -> usize {
        let keys = [key.to_string()];
        let sharing = match self.status(&keys).await {
            Ok(states) => states.first().map_or(Sharing::Exclusive, |s| s.sharing),
            Err(_) => Sharing::Exclusive,
        };
        votes::quorum_for(self.members.len(), sharing)
    }
}
