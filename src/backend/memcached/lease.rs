//! Taking, re-entering, renewing and releasing a lock, each checked against the owner in
//! the item's value and committed by compare-and-swap on the CAS id read with it: plain
//! `touch` and `delete` would act on whoever holds the key.
//!
//! Taking is an add (`ms` in mode `E`), then the next token from the counter, then a CAS
//! write of the token into the value: the counter moves only once the key is ours, so
//! tokens increase in the order the key was granted.

use std::time::{Duration, Instant};

use super::client::{Flags, Reply, Request};
use super::fence;
use super::keys::{Keys, Record};
use super::store::MemcachedStore;
use super::ttl;
use crate::backend::group::GROUP_OWNER;
use crate::backend::store::{Attempt, Busy};
use crate::backend::{now_ms, AcquireRequest, Acquired, LastRuns, Lease, ReleaseMode, Released};
use crate::error::{Error, Result};

/// How often a compare-and-swap that lost a race is tried again: the holders of a shared
/// or semaphore key all change its one item, so races are common there.
pub(super) const CAS_TRIES: usize = 16;

/// Whether a fresh grant's token is checked against what this process saw and the
/// last-run record (one server), or left to the caller (a quorum, which raises what is
/// behind instead of refusing it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    Check,
    Unchecked,
}

impl MemcachedStore {
    /// One attempt: take the key, re-enter it, or be refused.
    pub(super) async fn attempt_once(&self, req: &AcquireRequest) -> Result<Attempt> {
        self.take(req, Fence::Check)
            .await
            .map(|(attempt, _)| attempt)
    }

    /// One attempt, with the fencing check as `fence` says; also the floor that the
    /// lock's last-run record puts under the next token (0 unless granted afresh).
    pub(super) async fn take(&self, req: &AcquireRequest, fence: Fence) -> Result<(Attempt, u64)> {
        if !req.sharing.is_exclusive() {
            return Ok((self.take_shared(req).await?, 0));
        }
        let keys = self.keys(&req.key)?;
        let secs = ttl::seconds(req.ttl, &req.key, &self.name)?;
        let mut record = Record {
            owner: req.owner.clone(),
            token: 0,
            depth: 1,
            holder: req.holder.clone(),
            group: None,
        };
        for _ in 0..CAS_TRIES {
            record.holder.acquired_at_ms = now_ms();
            let sent = Instant::now();
            let add = Request::set(&keys.lock, &record.encode(), &format!("ME T{secs} c"));
            let replies = self
                .call(&req.key, &[add, Request::get(&keys.lock, "v t c")])
                .await?;
            match &replies[0] {
                Reply::Done(flags) => {
                    let cas = cas_of(flags);
                    let granted = self.grant(req, &keys, record, cas, secs, sent, fence);
                    // Whatever went wrong after the add (a counter that is not a number,
                    // a lower token, a reply lost after the token was written), the key
                    // is given back before the error is told: a failed acquire leaves
                    // nothing held.
                    let (lease, floor) = match granted.await {
                        Ok(granted) => granted,
                        Err(e) => {
                            self.give_back(req).await;
                            return Err(e);
                        }
                    };
                    return Ok((Attempt::Granted(Acquired { lease, guard: None }), floor));
                }
                Reply::NotStored => {}
                other => return Err(self.unexpected(&req.key, other)),
            }
            let Reply::Value(flags, value) = &replies[1] else {
                continue; // expired between the two commands: try again
            };
            let held = Record::decode(value, &req.key, &self.name)?;
            if held.owner == GROUP_OWNER {
                return Ok((self.take_shared(req).await?, 0));
            }
            let left = flags.num(b't');
            if !req.reenter.contains(&held.owner) {
                let busy = Busy {
                    holder: Some(held.info(&req.key, left)),
                    retry: left
                        .filter(|t| *t > 0)
                        .map(|t| Duration::from_secs(t as u64)),
                    ..Busy::default()
                };
                return Ok((Attempt::Busy(busy), 0));
            }
            if let Some(lease) = self.reenter(req, &keys, held, flags, secs).await? {
                return Ok((Attempt::Granted(Acquired { lease, guard: None }), 0));
            }
        }
        Err(self.client.unavailable(
            &format!("lock '{}'", req.key),
            "the lock item kept changing under us",
        ))
    }

    /// The token of a lock we just added, written into its value; with the floor of the
    /// lock's last-run record. On an error the caller gives the lock back.
    #[allow(clippy::too_many_arguments)]
    async fn grant(
        &self,
        req: &AcquireRequest,
        keys: &Keys,
        mut record: Record,
        cas: u64,
        secs: u64,
        sent: Instant,
        fence: Fence,
    ) -> Result<(Lease, u64)> {
        let next = Request::arith(&keys.token, &fence::next_flags(fence::seed()));
        let replies = self
            .call(&req.key, &[next, Request::get(&keys.runs, "v")])
            .await?;
        let token = match &replies[0] {
            Reply::Value(_, v) => parse_number(v),
            _ => None,
        };
        let Some(token) = token else {
            return Err(self.unexpected(&req.key, &replies[0]));
        };
        let floor = floor(&replies[1]);
        if fence == Fence::Check {
            fence::check(&self.name, &req.key, token, floor)?;
        }
        record.token = token;
        let write = Request::set(&keys.lock, &record.encode(), &format!("T{secs} C{cas}"));
        match &self.call(&req.key, &[write]).await?[0] {
            Reply::Done(_) => {}
            _ => {
                return Err(self.client.unavailable(
                    &format!("lock '{}'", req.key),
                    "the lock item vanished right after it was taken (evicted?)",
                ))
            }
        }
        if fence == Fence::Check {
            fence::saw(&self.name, &req.key, token);
        }
        Ok((self.lease(&req.key, &record, secs, sent, false), floor))
    }

    /// One level deeper on a lease one of `req.reenter` holds; `None` when it changed
    /// meanwhile.
    pub(super) async fn reenter(
        &self,
        req: &AcquireRequest,
        keys: &Keys,
        mut held: Record,
        flags: &Flags,
        secs: u64,
    ) -> Result<Option<Lease>> {
        held.depth += 1;
        let secs = secs.max(flags.num(b't').unwrap_or(0).max(0) as u64);
        let sent = Instant::now();
        let flags = format!("T{secs} C{}", cas_of(flags));
        let write = Request::set(&keys.lock, &held.encode(), &flags);
        match &self.call(&req.key, &[write]).await?[0] {
            Reply::Done(_) => Ok(Some(self.lease(&req.key, &held, secs, sent, true))),
            _ => Ok(None),
        }
    }

    /// Deletes a lock we added but cannot hand out.
    async fn drop_added(&self, key: &str, keys: &Keys, cas: u64) {
        let _ = self
            .call(key, &[Request::delete(&keys.lock, &format!("C{cas}"))])
            .await;
    }

    /// Gives back a grant to `req.owner` whose answer never arrived (a dropped attempt),
    /// or that failed after the lock item was added.
    pub(super) async fn give_back(&self, req: &AcquireRequest) {
        let Ok(keys) = self.keys(&req.key) else {
            return;
        };
        let Ok(replies) = self
            .call(&req.key, &[Request::get(&keys.lock, "v c")])
            .await
        else {
            return;
        };
        if let Reply::Value(flags, v) = &replies[0] {
            if Record::decode(v, &req.key, &self.name).is_ok_and(|r| r.owner == req.owner) {
                self.drop_added(&req.key, &keys, cas_of(flags)).await;
            }
        }
    }

    fn lease(&self, key: &str, r: &Record, secs: u64, sent: Instant, reentered: bool) -> Lease {
        let ttl = Duration::from_secs(secs);
        let sent_at = ttl::granted_at(sent);
        Lease::timed(key, &r.owner, r.token, ttl, reentered, sent_at).expiring_in(ttl - ttl::EARLY)
    }

    /// The lease of `owner` on `key`, its CAS id and its TTL left; `NotOwner` otherwise.
    pub(super) async fn owned(
        &self,
        verb: &str,
        key: &str,
        owner: Option<&str>,
        also: Option<Request>,
    ) -> Result<(Option<(Record, u64, i64)>, Vec<Reply>)> {
        let keys = self.keys(key)?;
        let mut requests = vec![Request::get(&keys.lock, "v c t")];
        requests.extend(also);
        let mut replies = self.call(key, &requests).await?;
        let first = replies.remove(0);
        let Reply::Value(flags, v) = first else {
            return match owner {
                None => Ok((None, replies)),
                Some(_) => Err(Error::lease_gone(verb, key, &self.name)),
            };
        };
        let record = Record::decode(&v, key, &self.name)?;
        // A group's members are checked by the caller (see `shared.rs`).
        let group = record.owner == GROUP_OWNER;
        if let Some(o) = owner.filter(|o| *o != record.owner && !group) {
            return Err(Error::held_by_other(verb, key, &self.name, o));
        }
        let left = flags.num(b't').unwrap_or(-1);
        Ok((Some((record, cas_of(&flags), left)), replies))
    }

    /// Renews by writing the same value back with a new TTL, if its CAS id is unchanged.
    /// A counter found missing while the lock is held is recreated above its token.
    pub(super) async fn renew_lease(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_marked(key, owner, ttl, None).await
    }

    /// Renews as [`Self::renew_lease`] and marks the lease as a finished run's, held until
    /// `held_until_ms` (`exec --hold-at-least`), for `status`.
    pub(super) async fn renew_marked(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        held_until_ms: Option<u64>,
    ) -> Result<Lease> {
        let keys = self.keys(key)?;
        let secs = ttl::seconds(ttl, key, &self.name)?;
        for _ in 0..CAS_TRIES {
            let counter = Request::get(&keys.token, "v");
            let (held, replies) = self.owned("renew", key, Some(owner), Some(counter)).await?;
            let (mut record, cas, _) = held.expect("owned");
            if let Some(group) = record.group.take() {
                let renewed = self.renew_member(key, owner, ttl, held_until_ms, (group, cas));
                match renewed.await? {
                    Some(lease) => return Ok(lease),
                    None => continue,
                }
            }
            if held_until_ms.is_some() {
                record.holder.held_until_ms = held_until_ms;
            }
            let sent = Instant::now();
            let write = Request::set(&keys.lock, &record.encode(), &format!("T{secs} C{cas}"));
            let mut requests = vec![write];
            if replies[0] == Reply::Missing {
                log::warn!(
                    "{}: lock '{key}': its fencing counter is gone while the lock is held (evicted?); recreating it above token {}",
                    self.name,
                    record.token
                );
                let start = fence::seed().max(record.token);
                requests.push(Request::arith(&keys.token, &format!("N0 J{start} D0")));
            }
            match &self.call(key, &requests).await?[0] {
                Reply::Done(_) => return Ok(self.lease(key, &record, secs, sent, false)),
                Reply::Exists => continue, // a re-entry changed the depth: read again
                _ => return Err(Error::lease_gone("renew", key, &self.name)),
            }
        }
        Err(Error::lease_gone("renew", key, &self.name))
    }

    /// Releases as `mode` says: one level down (CAS write), or the item deleted (CAS delete).
    pub(super) async fn release_lease(
        &self,
        key: &str,
        owner: &str,
        mode: ReleaseMode,
    ) -> Result<Released> {
        let keys = self.keys(key)?;
        let check = (mode != ReleaseMode::Force).then_some(owner);
        for _ in 0..CAS_TRIES {
            let (held, _) = self.owned("release", key, check, None).await?;
            let Some((mut record, cas, left)) = held else {
                return Ok(Released {
                    previous_owner: None,
                    still_held: false,
                });
            };
            if let Some(group) = record.group.take().filter(|_| check.is_some()) {
                let one = mode == ReleaseMode::One;
                match self.release_member(key, owner, one, (group, cas)).await? {
                    Some(released) => return Ok(released),
                    None => continue,
                }
            }
            let previous_owner = Some(record.owner.clone());
            let still_held = mode == ReleaseMode::One && record.depth > 1;
            let request = if still_held {
                record.depth -= 1;
                let flags = format!("T{} C{cas}", left.max(1));
                Request::set(&keys.lock, &record.encode(), &flags)
            } else {
                Request::delete(&keys.lock, &format!("C{cas}"))
            };
            match &self.call(key, &[request]).await?[0] {
                Reply::Done(_) => {
                    return Ok(Released {
                        previous_owner,
                        still_held,
                    })
                }
                Reply::Exists => continue,
                _ if mode == ReleaseMode::Force => continue,
                _ => return Err(Error::lease_gone("release", key, &self.name)),
            }
        }
        Err(self.client.unavailable(
            &format!("lock '{key}'"),
            "the lock item kept changing under us",
        ))
    }
}

pub(super) fn cas_of(flags: &Flags) -> u64 {
    flags.num(b'c').unwrap_or(0).max(0) as u64
}

pub(super) fn parse_number(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v).ok()?.trim().parse().ok()
}

/// The highest token in a lock's last-run records, if they were read.
fn floor(reply: &Reply) -> u64 {
    let Reply::Value(_, v) = reply else {
        return 0;
    };
    let runs: LastRuns = serde_json::from_slice(v).unwrap_or_default();
    [runs.last, runs.last_success]
        .iter()
        .flatten()
        .map(|r| r.fencing_token)
        .max()
        .unwrap_or(0)
}
