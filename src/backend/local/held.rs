//! The transitions of a held key — release, renew, detach — and its status, in a
//! [`Session`] under the key's state mutex (the acquiring ones are in `store.rs`).

use std::time::{Duration, Instant};

use super::file::boot_ms;
use super::locks;
use super::queue::UNLISTED;
use super::record::LeaseRecord;
use super::store::Session;
use crate::backend::{now_ms, KeyStatus, Lease, ReleaseMode, Released, WaiterInfo};
use crate::error::{Error, Result};

impl Session<'_> {
    /// Releases as `mode` says; `NotOwner` (and no change) when `owner` does not hold it.
    pub fn release(&mut self, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let Some(l) = self.live_lease()? else {
            self.commit()?;
            return match mode {
                ReleaseMode::Force => Ok(Released {
                    previous_owner: None,
                    still_held: false,
                }),
                _ => Err(self.not_owner("release", owner, None)),
            };
        };
        if mode != ReleaseMode::Force && l.owner != owner {
            return Err(self.not_owner("release", owner, Some(&l)));
        }
        let still_held = mode == ReleaseMode::One && l.depth > 1;
        if still_held {
            if let Some(cur) = self.st.lease.as_mut() {
                cur.depth -= 1;
            }
        } else {
            self.st.lease = None;
            self.st.freed_boot_ms = boot_ms();
        }
        self.dirty = true;
        self.commit()?;
        Ok(Released {
            previous_owner: Some(l.owner),
            still_held,
        })
    }

    /// Extends `owner`'s lease to `ttl` from now. A bound lease lives as long as its
    /// holder process, so there is nothing to write; the check alone tells the caller the
    /// lease is still there.
    pub fn renew(&mut self, owner: &str, ttl: Duration, sent_at: Instant) -> Result<Lease> {
        let live = self.live_lease()?;
        let l = match live {
            Some(l) if l.owner == owner => l,
            other => {
                self.commit()?;
                return Err(self.not_owner("renew", owner, other.as_ref()));
            }
        };
        if l.bound {
            return Ok(self.lease_of(&l, ttl, false, sent_at));
        }
        let ttl_ms = ttl.as_millis() as u64;
        let cur = self.st.lease.as_mut().expect("live lease");
        cur.ttl_ms = ttl_ms;
        cur.expires_boot_ms = boot_ms() + ttl_ms;
        cur.expires_wall_ms = now_ms() + ttl_ms;
        let l = cur.clone();
        self.dirty = true;
        self.commit()?;
        Ok(self.lease_of(&l, ttl, false, sent_at))
    }

    /// Turns `owner`'s lease into a detached one that expires `left` from now, marked for
    /// `status` (`exec --hold-at-least`): a bound lease would end with its process.
    pub fn detach(&mut self, owner: &str, left: Duration) -> Result<()> {
        match self.live_lease()? {
            Some(l) if l.owner == owner => {}
            other => {
                self.commit()?;
                return Err(self.not_owner("hold", owner, other.as_ref()));
            }
        }
        let ttl_ms = left.as_millis() as u64;
        let cur = self.st.lease.as_mut().expect("live lease");
        cur.bound = false;
        cur.ttl_ms = ttl_ms;
        cur.expires_boot_ms = boot_ms() + ttl_ms;
        cur.expires_wall_ms = now_ms() + ttl_ms;
        cur.holder.held_until_ms = Some(cur.expires_wall_ms);
        self.dirty = true;
        self.commit()
    }

    fn not_owner(&self, what: &str, owner: &str, held: Option<&LeaseRecord>) -> Error {
        let (key, backend) = (&self.st.key, &self.ctx.describe);
        match held {
            Some(_) => Error::held_by_other(what, key, backend, owner),
            None => Error::lease_gone(what, key, backend),
        }
    }

    /// The state of this key for `status`. Read-only: stale leases are shown as free but
    /// left for the next writer to clear.
    pub fn status(&mut self) -> Result<KeyStatus> {
        let lock = self.live_lease()?.map(|l| self.lock_info(&l));
        let waiters = match self.live_waiters(None)? {
            Some(list) if list.iter().any(|w| w.ticket == UNLISTED) => None,
            Some(list) => Some(
                list.into_iter()
                    .map(|w| WaiterInfo {
                        id: w.owner,
                        holder: w.holder,
                    })
                    .collect(),
            ),
            None => {
                let any = locks::any_waiter_before(self.file(), self.st.next_ticket)
                    .map_err(|e| self.io("cannot probe", e))?;
                (!any).then(Vec::new)
            }
        };
        Ok(KeyStatus {
            key: self.st.key.clone(),
            lock,
            waiters,
            servers: None,
            holders: Vec::new(),
            sharing: crate::backend::Sharing::Exclusive,
        })
    }
}
