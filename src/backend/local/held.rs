//! The transitions of a held key — release, renew, detach — and its status, in a
//! [`Session`] under the key's state mutex (the acquiring ones are in `store.rs`).

use std::time::{Duration, Instant};

use super::file::boot_ms;
use super::locks;
use super::order;
use super::record::{LeaseRecord, UNLISTED};
use super::store::Session;
use crate::backend::{now_ms, KeyStatus, Lease, ReleaseMode, Released, WaiterInfo};
use crate::error::{Error, Result};

impl Session<'_> {
    /// Releases as `mode` says; `NotOwner` (and no change) when `owner` does not hold it.
    /// `Force` frees every holder.
    pub fn release(&mut self, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let mut holders = self.live_holders()?;
        let Some(first) = holders.first().cloned() else {
            self.commit()?;
            return match mode {
                ReleaseMode::Force => Ok(Released {
                    previous_owner: None,
                    still_held: false,
                }),
                _ => Err(self.not_owner("release", owner, None)),
            };
        };
        let (previous, still_held) = match holders.iter().position(|l| l.owner == owner) {
            _ if mode == ReleaseMode::Force => (holders.drain(..).next(), false),
            None => return Err(self.not_owner("release", owner, Some(&first))),
            Some(i) if mode == ReleaseMode::One && holders[i].depth > 1 => {
                holders[i].depth -= 1;
                (Some(holders[i].clone()), true)
            }
            Some(i) => (Some(holders.remove(i)), false),
        };
        if !still_held {
            self.st.freed_boot_ms = boot_ms();
        }
        self.set_holders(holders);
        self.commit()?;
        Ok(Released {
            previous_owner: previous.map(|l| l.owner),
            still_held,
        })
    }

    /// `owner`'s live lease, or why it is not there (nothing written but the pruning).
    fn owned(&mut self, verb: &str, owner: &str) -> Result<LeaseRecord> {
        let holders = self.live_holders()?;
        match holders.iter().find(|l| l.owner == owner) {
            Some(l) => Ok(l.clone()),
            None => {
                self.commit()?;
                Err(self.not_owner(verb, owner, holders.first()))
            }
        }
    }

    /// Extends `owner`'s lease to `ttl` from now. A bound lease lives as long as its
    /// holder process, so there is nothing to write; the check alone tells the caller the
    /// lease is still there.
    pub fn renew(&mut self, owner: &str, ttl: Duration, sent_at: Instant) -> Result<Lease> {
        let l = self.owned("renew", owner)?;
        if l.bound {
            self.commit()?;
            return Ok(self.lease_of(&l, ttl, false, sent_at));
        }
        let ttl_ms = ttl.as_millis() as u64;
        let cur = self.holder_mut(owner).expect("live lease");
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
        self.owned("hold", owner)?;
        let ttl_ms = left.as_millis() as u64;
        let cur = self.holder_mut(owner).expect("live lease");
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

    /// The state of this key for `status`, waiters in the served order (superseded ones
    /// left out). Read-only: stale leases are shown as free but left for the next writer
    /// to clear.
    pub fn status(&mut self) -> Result<KeyStatus> {
        let live = self.live_holders()?;
        let holders = live.iter().map(|l| self.lock_info(l)).collect();
        let status = KeyStatus::group(self.st.key.clone(), self.st.sharing, holders);
        let waiters = match self.live_waiters(None)? {
            Some(list) if list.iter().any(|w| w.ticket == UNLISTED) => None,
            Some(mut list) => {
                list.sort_by_key(|w| order::place(w.priority, w.ticket));
                let waiting = list.into_iter().filter(|w| w.superseded_by.is_none());
                Some(
                    waiting
                        .map(|w| WaiterInfo {
                            id: w.owner,
                            holder: w.holder,
                            sharing: w.sharing,
                            priority: w.priority,
                        })
                        .collect(),
                )
            }
            None => {
                let any = locks::any_waiter_before(self.file(), self.st.next_ticket)
                    .map_err(|e| self.io("cannot probe", e))?;
                (!any).then(Vec::new)
            }
        };
        Ok(match waiters {
            Some(waiters) => status.with_waiters(waiters),
            None => status,
        })
    }
}
