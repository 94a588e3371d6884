//! What a quorum of memcached servers asks of one of them (`quorum/`): a take whose
//! token the quorum settles, raising a fencing counter that is behind, and giving back.

use super::client::{Reply, Request};
use super::keys::Keys;
use super::lease::{cas_of, parse_number, Fence, CAS_TRIES};
use super::store::MemcachedStore;
use crate::backend::store::Attempt;
use crate::backend::{AcquireRequest, ReleaseMode};
use crate::error::Result;

impl MemcachedStore {
    /// One attempt on this server for a quorum: the token is not checked here (the
    /// quorum raises what is behind instead of refusing it). With the floor the lock's
    /// last-run record puts under the next token.
    pub async fn take_for_quorum(&self, req: &AcquireRequest) -> Result<(Attempt, u64)> {
        self.take(req, Fence::Unchecked).await
    }

    /// Raises the fencing counter of `key` to `token` at least and, where `owner` holds
    /// the lock, stamps `token` on the lease. True when `owner` holds it stamped `token`.
    pub async fn raise(&self, key: &str, owner: &str, token: u64) -> Result<bool> {
        let keys = self.keys(key)?;
        self.raise_counter(key, &keys, token).await?;
        for _ in 0..CAS_TRIES {
            let (held, _) = self.owned("acquire", key, None, None).await?;
            let Some((mut record, cas, left)) = held else {
                return Ok(false);
            };
            if let Some(group) = record.group.take() {
                match self
                    .stamp_member(key, owner, token, (group, cas, left))
                    .await?
                {
                    Some(stamped) => return Ok(stamped),
                    None => continue,
                }
            }
            if record.owner != owner || record.token > token {
                return Ok(false);
            }
            if record.token == token {
                return Ok(true);
            }
            record.token = token;
            // The item's own expiry, unchanged: the lease is not extended here.
            let flags = format!("T{} C{cas}", left.max(1));
            let write = Request::set(&keys.lock, &record.encode(), &flags);
            match &self.call(key, &[write]).await?[0] {
                Reply::Done(_) => return Ok(true),
                Reply::Exists => continue,
                _ => return Ok(false),
            }
        }
        Ok(false)
    }

    /// The counter at `token` at least: added when missing, else increased by what it
    /// lacks, by compare-and-swap so that a concurrent increment is not lost.
    async fn raise_counter(&self, key: &str, keys: &Keys, token: u64) -> Result<()> {
        for _ in 0..CAS_TRIES {
            let replies = self.call(key, &[Request::get(&keys.token, "v c")]).await?;
            let request = match &replies[0] {
                Reply::Value(flags, v) => {
                    let have = parse_number(v).unwrap_or(0);
                    if have >= token {
                        return Ok(());
                    }
                    let flags = format!("C{} D{}", cas_of(flags), token - have);
                    Request::arith(&keys.token, &flags)
                }
                _ => Request::set(&keys.token, token.to_string().as_bytes(), "ME"),
            };
            match &self.call(key, &[request]).await?[0] {
                Reply::Done(_) | Reply::Value(..) => return Ok(()),
                _ => continue, // moved meanwhile: read again
            }
        }
        Err(self.client.unavailable(
            &format!("lock '{key}'"),
            "the fencing counter kept changing under us",
        ))
    }

    /// Gives back what a quorum's round got here and cannot keep: all of `owner`'s
    /// lease, or one level of it. Owner-checked; nothing to give back is no error.
    pub async fn take_back(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<()> {
        match self.release_lease(key, owner, mode).await {
            Ok(_) | Err(crate::error::Error::NotOwner(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// See [`MemcachedStore::renew_marked`]: the lease kept for `exec --hold-at-least`.
    pub async fn hold_until(
        &self,
        key: &str,
        owner: &str,
        ttl: std::time::Duration,
        until_ms: u64,
    ) -> Result<()> {
        self.renew_marked(key, owner, ttl, Some(until_ms))
            .await
            .map(drop)
    }
}
