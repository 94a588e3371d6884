//! Shared locks (`--shared`) and semaphores (`--limit N`) on etcd: the attempt and the wait
//! of a contender that may hold beside others (see [`crate::backend::line`] for who holds).
//!
//! An attempt is one transaction that creates our key if absent and reads every contender.
//! Admitted by the read of the transaction that created our key, its create revision is our
//! token; admitted later, one more write stamps our key ([`recipe::stamp`]) and its
//! revision is our token, so two contenders let in by one release never share one. A
//! waiter watches every deletion under the lock's name: any holder ahead may let it in.

use std::time::{Duration, Instant};

use super::client;
use super::proto::*;
use super::recipe::{self, Entry};
use super::store::{EtcdStore, EtcdWaiter};
use crate::backend::line::{self, Contender, Meta};
use crate::backend::sharing::Admission;
use crate::backend::store::{Attempt, Busy};
use crate::backend::{now_ms, AcquireRequest, Acquired, Released};
use crate::error::{Error, Result};

impl EtcdStore {
    /// Takes `req.key` beside its holders, or queues for it, on a granted lease. A caller
    /// that can never join the holders (see [`Admission::Conflict`]) is refused at once.
    pub(super) async fn enter_shared(
        &self,
        req: &AcquireRequest,
        w: &mut EtcdWaiter,
    ) -> Result<Attempt> {
        let id = w.lease.as_ref().map_or_else(client::new_lease_id, |g| g.id);
        let dir = self.dir(&req.key);
        let key = recipe::contender_key(&dir, id);
        let runs = super::runs::last_key(&self.prefix, &req.key);
        let meta = self.meta_of(req);
        let txn = recipe::enter_shared(&dir, &key, meta.encode(), id, &runs);
        let resp = self.granted_txn(req, w, id, txn).await?;
        w.runs = recipe::run_lease(&resp);
        w.seen = resp.header.as_ref().map_or(0, |h| h.revision);
        let read = usize::from(resp.succeeded);
        let entries: Vec<Entry> = recipe::range_kvs(&resp, read)
            .iter()
            .filter(|kv| recipe::contends(&dir, kv))
            .cloned()
            .map(Entry::read)
            .collect();
        let Some(i) = entries.iter().position(|e| e.kv.key == key) else {
            return Err(self.client_gone(&req.key));
        };
        let created = entries[i].kv.create_revision;
        w.queued_at = Some(created);
        let n = line::holders(&entries).len();
        if i < n {
            return self.admitted(req, w, &entries[i], resp.succeeded).await;
        }
        // Not among the holders: refused for good when it can never hold beside them.
        let ahead = line::sharings(&entries[..i]);
        if let Admission::Conflict(h) = line::verdict(req.sharing, &ahead) {
            // Our key goes with our lease when the loop leaves; refused, never queued.
            return Err(req.sharing.conflict(&req.key, &self.name, h));
        }
        Ok(Attempt::Busy(Busy {
            holder: Some(entries[0].info(&req.key)),
            position: Some((i - n + 1) as u64),
            waiters: Some((entries.len() - n) as u64),
            ..Busy::default()
        }))
    }

    /// The holder of `key` that `owner` names, among `entries` (see [`Self::entries`]);
    /// else the error of `what` (`renew`, `release`, `hold`): held by another, or free.
    pub(super) fn held_by<'a>(
        &self,
        entries: &'a [Entry],
        what: &str,
        key: &str,
        owner: &str,
    ) -> Result<&'a Entry> {
        let holders = line::holders(entries);
        match holders.iter().find(|h| h.owned_by(owner)) {
            Some(h) => Ok(h),
            None if holders.is_empty() => Err(Error::lease_gone(what, key, &self.name)),
            None => Err(Error::held_by_other(what, key, &self.name, owner)),
        }
    }

    /// `unlock --force`: ends the lease of every holder among `entries`.
    pub(super) async fn free_all(&self, entries: &[Entry]) -> Result<Released> {
        let holders = line::holders(entries);
        for h in holders {
            self.client.revoke(h.kv.lease).await?;
        }
        Ok(Released {
            previous_owner: holders.first().map(|h| h.meta.owner.clone()),
            still_held: false,
        })
    }

    /// What our key says about us.
    pub(super) fn meta_of(&self, req: &AcquireRequest) -> Meta {
        let mut meta = Meta {
            owner: req.owner.clone(),
            depth: 1,
            sharing: req.sharing,
            holder: req.holder.clone(),
            ..Meta::default()
        };
        meta.holder.acquired_at_ms = now_ms();
        meta
    }

    /// Our key `ours` is among the holders: the lease, its token the revision of the write
    /// that created our key when that write admitted us (`fresh`), else of a stamp.
    async fn admitted(
        &self,
        req: &AcquireRequest,
        w: &mut EtcdWaiter,
        ours: &Entry,
        fresh: bool,
    ) -> Result<Attempt> {
        let (ttl, sent) = w
            .lease
            .as_ref()
            .map_or((req.ttl, Instant::now()), |g| (g.ttl, g.refreshed));
        let id = w.lease.as_ref().map_or(ours.kv.lease, |g| g.id);
        let created = ours.kv.create_revision;
        let entry = if fresh {
            ours.clone()
        } else {
            let meta = self.meta_of(req);
            let done = self
                .client
                .txn(recipe::stamp(&ours.kv.key, created, meta.encode()))
                .await?;
            if !done.succeeded {
                // Our key is gone (unlocked by force, or its lease expired): queue again.
                w.queued_at = None;
                return Box::pin(self.enter_shared(req, w)).await;
            }
            let rev = done.header.map_or(0, |h| h.revision);
            Entry {
                kv: KeyValue {
                    mod_revision: rev,
                    ..ours.kv.clone()
                },
                meta,
            }
        };
        let lease = self.lease_of(&entry, &req.key, ttl, sent);
        self.took(req, id, w.runs, created);
        Ok(Attempt::Granted(Acquired { lease, guard: None }))
    }

    /// Waits until a contender for `key` is deleted after revision `seen`, for at most
    /// `pause`.
    pub(super) async fn await_release(&self, key: &str, seen: i64, pause: Duration) -> Result<()> {
        let dir = self.dir(key);
        self.await_deletion(&dir, seen + 1, pause).await
    }
}
