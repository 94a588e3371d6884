//! Shared (`--shared`) and semaphore (`--limit N`) holders on one memcached server.
//!
//! The lock item then keeps every holder as one [`Group`] under the owner
//! [`GROUP_OWNER`], and is changed only by compare-and-swap: read it with its CAS id,
//! admit by [`Sharing::admit`], write it back with that id; a write that lost a race reads
//! again. An exclusive attempt still starts with its one `add`, so a plain lock costs what
//! it did; it comes here only when it finds a group.
//!
//! Memcached keeps no queue: no waiter is ahead of another, so first come first served is
//! not guaranteed, and a steady stream of readers can starve a writer. Each member's end
//! is kept in milliseconds on the clock of the client that wrote it (memcached has no
//! clock a client can read): hosts whose clocks disagree see members end early or late by
//! that much; the item itself expires with its last member by the server's own TTL.

use std::time::{Duration, Instant};

use super::client::{Reply, Request};
use super::fence;
use super::keys::{Keys, Record};
use super::lease::{cas_of, parse_number, CAS_TRIES};
use super::store::MemcachedStore;
use super::ttl;
use crate::backend::group::{Group, Member, GROUP_OWNER};
use crate::backend::sharing::Admission;
use crate::backend::store::{Attempt, Busy};
use crate::backend::{now_ms, AcquireRequest, Acquired, Holder, Lease, Released, Sharing};
use crate::error::{Error, Result};

/// The value of an item that keeps `group`.
fn group_record(group: Group) -> Record {
    Record {
        owner: GROUP_OWNER.to_string(),
        token: 0,
        depth: 0,
        holder: Holder::default(),
        group: Some(group),
    }
}

/// The item's TTL for `group`: until its last member ends, in whole seconds rounded up,
/// and never under memcached's shortest.
fn group_secs(group: &Group, now: i64) -> u64 {
    let left = (group.until_ms() - now).max(0) as u64;
    left.div_ceil(1000).max(ttl::MIN_TTL.as_secs())
}

fn now() -> i64 {
    now_ms() as i64
}

impl MemcachedStore {
    /// One attempt of a caller that shares, or of an exclusive caller that found a group.
    pub(super) async fn take_shared(&self, req: &AcquireRequest) -> Result<Attempt> {
        let keys = self.keys(&req.key)?;
        let secs = ttl::seconds(req.ttl, &req.key, &self.name)?;
        let mut last = None;
        for _ in 0..CAS_TRIES {
            let replies = self
                .call(&req.key, &[Request::get(&keys.lock, "v t c")])
                .await?;
            let (group, cas) = match &replies[0] {
                Reply::Value(flags, v) => {
                    let held = Record::decode(v, &req.key, &self.name)?;
                    match held.group {
                        Some(g) if held.owner == GROUP_OWNER => (g, Some(cas_of(flags))),
                        _ => return self.beside_exclusive(req, &keys, held, flags, secs).await,
                    }
                }
                Reply::Missing => (Group::new(req.sharing, self.member(req, 0, secs)), None),
                other => return Err(self.unexpected(&req.key, other)),
            };
            last = Some(group.clone());
            if let Some(attempt) = self.join(req, &keys, group, cas, secs).await? {
                return Ok(attempt);
            }
        }
        // Every write lost a race: others are joining and leaving the group. That is a
        // busy key, not a broken server: the caller waits and looks again.
        let group = last.expect("at least one try");
        Ok(Attempt::Busy(busy(req, &group, now())))
    }

    fn member(&self, req: &AcquireRequest, token: u64, secs: u64) -> Member {
        let mut holder = req.holder.clone();
        holder.acquired_at_ms = now_ms();
        Member {
            owner: req.owner.clone(),
            token,
            depth: 1,
            until_ms: now() + (secs * 1000) as i64,
            holder,
        }
    }

    /// A sharing caller beside an exclusive holder: re-enter it, wait, or conflict.
    async fn beside_exclusive(
        &self,
        req: &AcquireRequest,
        keys: &Keys,
        held: Record,
        flags: &super::client::Flags,
        secs: u64,
    ) -> Result<Attempt> {
        let left = flags.num(b't');
        if req.reenter.contains(&held.owner) {
            if let Some(lease) = self.reenter(req, keys, held.clone(), flags, secs).await? {
                return Ok(Attempt::Granted(Acquired { lease, guard: None }));
            }
        }
        if let Admission::Conflict(h) = req.sharing.admit(Some(Sharing::Exclusive), 1, &[]) {
            return Err(req.sharing.conflict(&req.key, &self.name, h));
        }
        Ok(Attempt::Busy(Busy {
            holder: Some(held.info(&req.key, left)),
            retry: left
                .filter(|t| *t > 0)
                .map(|t| Duration::from_secs(t as u64)),
            ..Busy::default()
        }))
    }

    /// Admits the caller to `group` (read with `cas`, or `None`: no item) and writes it
    /// back; `None` when the write lost a race.
    async fn join(
        &self,
        req: &AcquireRequest,
        keys: &Keys,
        mut group: Group,
        cas: Option<u64>,
        secs: u64,
    ) -> Result<Option<Attempt>> {
        let now = now();
        if cas.is_some() {
            group.prune(now);
        }
        let until = now + (secs * 1000) as i64;
        // Our own earlier attempt, granted but unheard of, or a re-entry (an item read: a
        // new group's only member is the caller, not yet granted).
        let again = cas.and_then(|_| group.hold_again(&req.owner, &req.reenter, until));
        if let Some((owner, _, nested)) = again {
            let m = group.member(&owner).cloned().expect("a member");
            return self.write(req, keys, group, cas, now, m, nested).await;
        }
        let fresh = cas.is_none() || group.is_empty();
        if !fresh {
            match group.admit(req.sharing, &[]) {
                Admission::Admit => {}
                Admission::Wait => return Ok(Some(Attempt::Busy(busy(req, &group, now)))),
                Admission::Conflict(h) => {
                    return Err(req.sharing.conflict(&req.key, &self.name, h))
                }
            }
        }
        let token = self.next_token(req, keys).await?;
        let m = self.member(req, token, secs);
        if fresh {
            group = Group::new(req.sharing, m.clone());
        } else {
            group.join(m.clone());
        }
        self.write(req, keys, group, cas, now, m, false).await
    }

    /// Writes `group` (as a plain lease when it is an exclusive caller's alone) and
    /// hands `m` its lease; `None` when the CAS (or add) lost a race.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        req: &AcquireRequest,
        keys: &Keys,
        group: Group,
        cas: Option<u64>,
        now: i64,
        m: Member,
        reentered: bool,
    ) -> Result<Option<Attempt>> {
        let secs = group_secs(&group, now);
        // An exclusive caller that found only ended members takes a plain lease.
        let record = if group.sharing.is_exclusive() {
            Record {
                owner: m.owner.clone(),
                token: m.token,
                depth: 1,
                holder: m.holder.clone(),
                group: None,
            }
        } else {
            group_record(group)
        };
        let flags = match cas {
            Some(cas) => format!("T{secs} C{cas}"),
            None => format!("ME T{secs}"),
        };
        let sent = Instant::now();
        let write = Request::set(&keys.lock, &record.encode(), &flags);
        match &self.call(&req.key, &[write]).await?[0] {
            Reply::Done(_) => {
                let lease = self.member_lease(&req.key, &m, now, sent, reentered);
                Ok(Some(Attempt::Granted(Acquired { lease, guard: None })))
            }
            Reply::NotStored | Reply::Exists | Reply::Missing => Ok(None),
            other => Err(self.unexpected(&req.key, other)),
        }
    }

    async fn next_token(&self, req: &AcquireRequest, keys: &Keys) -> Result<u64> {
        let next = Request::arith(&keys.token, &fence::next_flags(fence::seed()));
        let replies = self.call(&req.key, &[next]).await?;
        match &replies[0] {
            Reply::Value(_, v) => {
                parse_number(v).ok_or_else(|| self.unexpected(&req.key, &replies[0]))
            }
            other => Err(self.unexpected(&req.key, other)),
        }
    }

    fn member_lease(&self, key: &str, m: &Member, now: i64, sent: Instant, nested: bool) -> Lease {
        let ttl = Duration::from_millis((m.until_ms - now).max(0) as u64);
        let sent_at = ttl::granted_at(sent);
        let lease = Lease::timed(key, &m.owner, m.token, ttl, nested, sent_at);
        lease.expiring_in(ttl.saturating_sub(ttl::EARLY))
    }

    /// Renews `owner`'s place in `group` (read with `cas`); `None` when the write lost a race.
    pub(super) async fn renew_member(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        held_until_ms: Option<u64>,
        (mut group, cas): (Group, u64),
    ) -> Result<Option<Lease>> {
        let keys = self.keys(key)?;
        let secs = ttl::seconds(ttl, key, &self.name)?;
        let now = now();
        group.prune(now);
        let until = now + (secs * 1000) as i64;
        if group.renew(owner, until).is_none() {
            return Err(Error::lease_gone("renew", key, &self.name));
        }
        let m = group.members.iter_mut().find(|m| m.owner == owner);
        let m = m.expect("renewed");
        if held_until_ms.is_some() {
            m.holder.held_until_ms = held_until_ms;
        }
        let m = m.clone();
        let flags = format!("T{} C{cas}", group_secs(&group, now));
        let sent = Instant::now();
        let write = Request::set(&keys.lock, &group_record(group).encode(), &flags);
        match &self.call(key, &[write]).await?[0] {
            Reply::Done(_) => Ok(Some(self.member_lease(key, &m, now, sent, false))),
            Reply::Exists => Ok(None),
            _ => Err(Error::lease_gone("renew", key, &self.name)),
        }
    }

    /// Releases `owner`'s place in `group` (read with `cas`): one level, or all of them;
    /// the item goes with its last member. `None` when the write lost a race.
    pub(super) async fn release_member(
        &self,
        key: &str,
        owner: &str,
        one_level: bool,
        (mut group, cas): (Group, u64),
    ) -> Result<Option<Released>> {
        let keys = self.keys(key)?;
        let now = now();
        group.prune(now);
        let Some(depth) = group.release(owner, one_level) else {
            return Err(Error::lease_gone("release", key, &self.name));
        };
        let request = if group.is_empty() {
            Request::delete(&keys.lock, &format!("C{cas}"))
        } else {
            let flags = format!("T{} C{cas}", group_secs(&group, now));
            Request::set(&keys.lock, &group_record(group).encode(), &flags)
        };
        match &self.call(key, &[request]).await?[0] {
            Reply::Done(_) => Ok(Some(Released {
                previous_owner: Some(owner.to_string()),
                still_held: depth > 0,
            })),
            Reply::Exists => Ok(None),
            _ => Err(Error::lease_gone("release", key, &self.name)),
        }
    }
}

impl MemcachedStore {
    /// A quorum's token stamped on `owner`'s place in `group` (read with `cas`, `left`
    /// seconds to live), never one another member has: two holders at once never share a
    /// token. True when stamped; `None` when the write lost a race.
    pub(super) async fn stamp_member(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        (mut group, cas, left): (Group, u64, i64),
    ) -> Result<Option<bool>> {
        let taken = group
            .members
            .iter()
            .any(|m| m.owner != owner && m.token == token);
        let Some(m) = group.members.iter_mut().find(|m| m.owner == owner) else {
            return Ok(Some(false));
        };
        if m.token == token {
            return Ok(Some(true));
        }
        if m.token > token || taken {
            return Ok(Some(false));
        }
        m.token = token;
        let keys = self.keys(key)?;
        // The item's own expiry, unchanged: no lease is extended here.
        let flags = format!("T{} C{cas}", left.max(1));
        let write = Request::set(&keys.lock, &group_record(group).encode(), &flags);
        match &self.call(key, &[write]).await?[0] {
            Reply::Done(_) => Ok(Some(true)),
            Reply::Exists => Ok(None),
            _ => Ok(Some(false)),
        }
    }
}

/// A refusal by a group: its member that ends first stands for them all.
fn busy(req: &AcquireRequest, group: &Group, now: i64) -> Busy {
    let first = group
        .infos(&req.key, now)
        .into_iter()
        .min_by_key(|l| l.ttl_left_ms);
    Busy {
        retry: first
            .as_ref()
            .and_then(|l| l.ttl_left_ms)
            .map(Duration::from_millis),
        holder: first,
        ..Busy::default()
    }
}
