//! The etcd [`LockStore`]: the lock recipe of etcd's `concurrency.Mutex` on the store seam.
//!
//! Each acquisition has its own lease (the waiter's key lives on it, and becomes the
//! holder's key); an exclusive waiter watches only the deletion of the contender just
//! before it. Shared locks and semaphores are in [`super::shared`].
//! The fencing token is the revision at which the holder acquired: its key's create
//! revision when it took a free lock, else the revision of the write that handed it over
//! or took its turn once its predecessors were gone (no earlier than the previous holder's
//! release).
//!
//! Round trips of one `exec` on a free lock: the lease grant, then the transaction that
//! creates the key; at the end, one transaction that writes the run's record and deletes the
//! key (the lock is free from there); the lease, with nothing left on it, expires on its own.
//! Three Raft writes, as `etcdctl lock` makes (grant, create, revoke). That transaction also
//! hands the lock over to the next waiter if it is dlock's: it rewrites the waiter's key,
//! whose mod revision, the release's, becomes its token, so that the waiter, which watches its
//! own key too, holds with no request of its own. The next waiter is read while the command
//! runs, off the path of the release. A waiter not handed the lock (after `etcdctl lock`, or
//! when a waiter left) takes its turn with one write.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::client::{self, Client};
use super::proclaim;
use super::proto::*;
use super::recipe::{self, Entry};
use super::streams::KeepAlive;
use super::url::Target;
use crate::backend::line::{self, Contender, Meta};
use crate::backend::store::{Attempt, Busy};
use crate::backend::{now_ms, AcquireRequest, Acquired, Lease, RunRecord, Sharing};
use crate::error::{Error, Result};

/// A connection to one etcd cluster, holding locks under `prefix`.
pub struct EtcdStore {
    pub(super) client: Client,
    pub(super) name: String,
    pub(super) prefix: String,
    /// Renewals of any lease go through one keep-alive stream.
    pub(super) keep_alive: Mutex<KeepAlive>,
    /// The locks this process took (the last few): a whole release of one of them needs
    /// no read of the lock first.
    pub(super) took: std::sync::Mutex<Vec<Took>>,
}

/// One acquisition: its lease and, once queued, its key's create revision.
#[derive(Default)]
pub struct EtcdWaiter {
    pub(super) lease: Option<Granted>,
    pub(super) queued_at: Option<i64>,
    /// The lease of the lock's run records, as the last attempt read it.
    pub(super) runs: i64,
    /// The revision of the last attempt's read: a shared waiter watches from there.
    pub(super) seen: i64,
    /// Our key as the holder before us rewrote it to hand the lock over, seen by the watch.
    pub(super) handed: Option<KeyValue>,
}

pub(super) struct Granted {
    pub(super) id: i64,
    pub(super) ttl: Duration,
    /// When the last grant or keep-alive that was answered was sent.
    pub(super) refreshed: Instant,
}

/// etcd TTLs are whole seconds: a TTL is rounded up, never shortened.
pub fn whole_seconds(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    secs.max(1) as i64
}

impl EtcdStore {
    /// Connects to the cluster an `etcd://` URL names.
    pub async fn connect(t: &Target) -> Result<EtcdStore> {
        let client =
            Client::connect_with(&t.endpoints, &t.name, t.credentials.clone(), t.tls).await?;
        Ok(EtcdStore {
            keep_alive: Mutex::new(client.keep_alive()),
            took: Default::default(),
            client,
            name: t.name.clone(),
            prefix: t.prefix.clone(),
        })
    }

    pub(super) fn dir(&self, key: &str) -> Vec<u8> {
        recipe::lock_dir(&self.prefix, key)
    }

    /// Sends `txn` (which puts our key on lease `id`), and grants lease `id` first when
    /// this acquisition has none yet. The two go one after the other: sent together, etcd
    /// applies the put first about as often as not (each request has its own goroutine), and
    /// the refused put costs a Raft write of its own, more than the round trip saved.
    pub(super) async fn granted_txn(
        &self,
        req: &AcquireRequest,
        w: &mut EtcdWaiter,
        id: i64,
        txn: TxnRequest,
    ) -> Result<TxnResponse> {
        for _ in 0..2 {
            if w.lease.is_none() {
                let sent = Instant::now();
                let granted = self.client.grant_id(whole_seconds(req.ttl), id).await?;
                w.lease = Some(Granted {
                    id,
                    ttl: Duration::from_secs(granted.ttl.max(1) as u64),
                    refreshed: sent,
                });
            }
            match self.client.txn_on_lease(txn.clone()).await? {
                Some(resp) => return Ok(resp),
                // Our lease expired while we waited, and our key with it: the id is free
                // again, granted anew; the key goes to the back of the line.
                None => (w.lease, w.queued_at) = (None, None),
            }
        }
        Err(self.client_gone(&req.key))
    }

    /// Every contender for `key`, oldest (the holder) first.
    pub(super) async fn entries(&self, key: &str) -> Result<(Vec<Entry>, i64)> {
        let resp = self
            .client
            .range(recipe::contenders(&self.dir(key), 0))
            .await?;
        let rev = resp.header.map_or(0, |h| h.revision);
        let dir = self.dir(key);
        let line = resp.kvs.into_iter().filter(|kv| recipe::contends(&dir, kv));
        let mut entries: Vec<Entry> = line.map(Entry::read).collect();
        if entries.iter().any(proclaim::bare) {
            let siblings = proclaim::meta_dir(&self.prefix, key);
            let siblings = self.client.range(recipe::contenders(&siblings, 0)).await?;
            proclaim::join(&mut entries, &siblings.kvs, &self.prefix, key);
        }
        Ok((entries, rev))
    }

    /// What our key on `lease` holds for `meta`, and its sibling's write (an election's).
    fn values(&self, key: &str, lease: i64, meta: &Meta) -> (Vec<u8>, Option<RequestOp>) {
        proclaim::values(&self.prefix, key, lease, meta)
    }

    pub(super) fn lease_of(&self, e: &Entry, key: &str, ttl: Duration, sent_at: Instant) -> Lease {
        Lease::timed(key, &e.meta.owner, e.token(), ttl, false, sent_at)
    }

    /// Re-enters `key` when one of `req.reenter` holds it: one level deeper on its lease.
    pub(super) async fn reenter(&self, req: &AcquireRequest) -> Result<Option<Acquired>> {
        if req.reenter.is_empty() {
            return Ok(None);
        }
        let sent = Instant::now();
        let (entries, _) = self.entries(&req.key).await?;
        let held = line::holders(&entries).iter();
        let Some(holder) = held
            .clone()
            .find(|h| req.reenter.iter().any(|o| h.owned_by(o)))
        else {
            return Ok(None);
        };
        let mut meta = holder.meta.clone();
        meta.depth += 1;
        meta.token = Some(holder.token());
        let (value, sibling) = self.values(&req.key, holder.kv.lease, &meta);
        let mut txn = recipe::rewrite(&holder.kv.key, holder.kv.mod_revision, value.clone());
        txn.success.extend(sibling);
        let done = self.client.txn(txn).await?;
        if recipe::written_at(&done, &value, 0).is_none() {
            return Ok(None); // changed meanwhile: attempt as anyone would
        }
        let ttl = self.client.time_to_live(holder.kv.lease).await?;
        let ttl = Duration::from_secs(ttl.ttl.max(0) as u64);
        let mut lease = self.lease_of(holder, &req.key, ttl, sent);
        lease.reentered = true;
        Ok(Some(Acquired { lease, guard: None }))
    }

    /// Takes the key or queues for it, on a granted lease.
    pub(super) async fn enter(&self, req: &AcquireRequest, w: &mut EtcdWaiter) -> Result<Attempt> {
        if !req.sharing.is_exclusive() {
            return self.enter_shared(req, w).await;
        }
        if let (Some(rev), Some(g)) = (w.queued_at, &w.lease) {
            return self.take_turn(req, w, rev, g.id).await;
        }
        let id = w.lease.as_ref().map_or_else(client::new_lease_id, |g| g.id);
        let dir = self.dir(&req.key);
        let key = recipe::contender_key(&dir, id);
        let mut meta = self.meta_of(req);
        let runs = super::runs::last_key(&self.prefix, &req.key);
        let (value, sibling) = self.values(&req.key, id, &meta);
        let mut txn = recipe::enter(&dir, &key, value, id, &runs);
        txn.success.extend(sibling);
        let resp = self.granted_txn(req, w, id, txn).await?;
        w.runs = recipe::run_lease(&resp);
        let (ttl, sent) = w.lease.as_ref().map(|g| (g.ttl, g.refreshed)).unzip();
        let (ttl, sent) = (ttl.unwrap_or(req.ttl), sent.unwrap_or_else(Instant::now));
        let rev = resp.header.as_ref().map_or(0, |h| h.revision);
        let ours = match resp.succeeded {
            true => rev,
            false => match recipe::range_kvs(&resp, 0).first() {
                Some(kv) => kv.create_revision,
                None => return Err(self.client_gone(&req.key)),
            },
        };
        w.queued_at = Some(ours);
        let holder = recipe::line(&resp, 1, &dir).first().map(|&kv| kv.clone());
        match holder.map(Entry::read) {
            Some(h) if h.kv.create_revision != ours => {
                refuse(req, &h, &self.name)?;
                Ok(Attempt::Busy(self.busy(req, &resp, ours)))
            }
            _ if resp.succeeded => {
                let kv = KeyValue {
                    key,
                    create_revision: rev,
                    mod_revision: rev,
                    lease: id,
                    value: meta.encode(),
                    ..KeyValue::default()
                };
                let lease = self.lease_of(&Entry::read(kv), &req.key, ttl, sent);
                self.took(req, id, w.runs, rev);
                Ok(Attempt::Granted(Acquired { lease, guard: None }))
            }
            _ => {
                // Our predecessors are gone: the token is the revision of this write,
                // later than any earlier holder's release (`Entry::token` reads it back).
                meta.holder.acquired_at_ms = now_ms();
                let (value, sibling) = self.values(&req.key, id, &meta);
                let mut txn = recipe::rewrite(&key, rev_of_ours(&resp), value.clone());
                txn.success.extend(sibling);
                let done = self.client.txn(txn).await?;
                let Some(written) = recipe::written_at(&done, &value, 0) else {
                    return Err(self.client_gone(&req.key));
                };
                meta.token = Some(written as u64);
                let entry = Entry {
                    kv: KeyValue::default(),
                    meta,
                };
                let lease = self.lease_of(&entry, &req.key, ttl, sent);
                self.took(req, id, w.runs, ours);
                Ok(Attempt::Granted(Acquired { lease, guard: None }))
            }
        }
    }

    /// A queued waiter's attempt, once its key (created at `rev`) may be the oldest: read
    /// where it stands; handed the lock over by the holder before it (see
    /// [`recipe::release`]), it holds with no write; first without that (the one before was
    /// `etcdctl lock`'s, or left the line), it takes its turn with one write
    /// ([`recipe::take_turn`]); else it waits on, with nothing written.
    async fn take_turn(
        &self,
        req: &AcquireRequest,
        w: &mut EtcdWaiter,
        rev: i64,
        id: i64,
    ) -> Result<Attempt> {
        if let Some(granted) = self.handed_over(req, w, rev, id) {
            return Ok(granted);
        }
        let dir = self.dir(&req.key);
        let key = recipe::contender_key(&dir, id);
        let runs = super::runs::last_key(&self.prefix, &req.key);
        let resp = self.client.txn(recipe::standing(&dir, &key, &runs)).await?;
        w.runs = recipe::run_lease(&resp);
        let Some(ours) = recipe::range_kvs(&resp, 0).first().cloned() else {
            // Our key is gone (unlocked by force, or its lease expired): queue again, on
            // the same lease while it lasts.
            w.queued_at = None;
            return Box::pin(self.enter(req, w)).await;
        };
        let first = recipe::line(&resp, 1, &dir).first().map(|&kv| kv.clone());
        if first.as_ref().map(|f| f.create_revision) != Some(ours.create_revision) {
            if let Some(h) = first {
                refuse(req, &Entry::read(h), &self.name)?;
            }
            return Ok(Attempt::Busy(self.busy(req, &resp, rev)));
        }
        let (ttl, sent) = w
            .lease
            .as_ref()
            .map_or((req.ttl, Instant::now()), |g| (g.ttl, g.refreshed));
        if ours.mod_revision > ours.create_revision {
            // Handed over: only the holder before us writes a waiting key, in the write that
            // freed the lock; its revision is our token (`Entry::token`).
            let ours = proclaim::own(ours, self.meta_of(req));
            let lease = self.lease_of(&ours, &req.key, ttl, sent);
            self.took(req, id, w.runs, rev);
            return Ok(Attempt::Granted(Acquired { lease, guard: None }));
        }
        let mut meta = self.meta_of(req);
        let (value, sibling) = self.values(&req.key, id, &meta);
        let mut txn = recipe::take_turn(&dir, &key, rev, value, &runs);
        txn.success.extend(sibling);
        let resp = self.client.txn(txn).await?;
        if resp.succeeded {
            // The token is the revision of this write (`Entry::token` reads it back).
            meta.token = resp.header.map(|h| h.revision as u64);
            let entry = Entry {
                kv: KeyValue::default(),
                meta,
            };
            let lease = self.lease_of(&entry, &req.key, ttl, sent);
            self.took(req, id, w.runs, rev);
            return Ok(Attempt::Granted(Acquired { lease, guard: None }));
        }
        if recipe::range_kvs(&resp, 0).is_empty() {
            w.queued_at = None;
            return Box::pin(self.enter(req, w)).await;
        }
        Ok(Attempt::Busy(self.busy(req, &resp, rev)))
    }

    /// What a waiter whose key was created at `ours` learned from an [`recipe::enter`]
    /// answer: the holder and its place.
    fn busy(&self, req: &AcquireRequest, resp: &TxnResponse, ours: i64) -> Busy {
        let line = recipe::line(resp, 1, &self.dir(&req.key));
        let holder = line.first().map(|&kv| Entry::read(kv.clone()));
        let (position, waiters) = recipe::queue_place(&line, ours);
        Busy {
            holder: holder.map(|h| h.info(&req.key)),
            position,
            waiters,
            ..Busy::default()
        }
    }

    pub(super) fn client_gone(&self, key: &str) -> Error {
        Error::Transient(format!(
            "cannot acquire lock '{key}' on {}: our waiting key vanished (its lease expired?)",
            self.name
        ))
    }

    /// Keeps the waiter's lease alive while it waits; false when the lease is gone.
    pub(super) async fn refresh(&self, w: &mut EtcdWaiter) -> Result<bool> {
        let Some(g) = &mut w.lease else {
            return Ok(true);
        };
        if g.refreshed.elapsed() < g.ttl / 3 {
            return Ok(true);
        }
        let sent = Instant::now();
        let ttl = self.keep_alive.lock().await.once(g.id).await?;
        if ttl <= 0 {
            w.lease = None;
            w.queued_at = None;
            return Ok(false);
        }
        g.refreshed = sent;
        Ok(true)
    }
}

/// Refuses an exclusive caller a lock held as a semaphore (see [`Admission::Conflict`]): it
/// must not wait for it. Its key goes with its lease when the loop leaves.
///
/// [`Admission::Conflict`]: crate::backend::sharing::Admission::Conflict
fn refuse(req: &AcquireRequest, holder: &Entry, name: &str) -> Result<()> {
    match holder.meta.sharing {
        held @ Sharing::Limit(_) => Err(req.sharing.conflict(&req.key, name, held)),
        _ => Ok(()),
    }
}

/// The mod revision of our key in an `enter` transaction that found it.
fn rev_of_ours(resp: &TxnResponse) -> i64 {
    recipe::range_kvs(resp, 0)
        .first()
        .map_or(0, |kv| kv.mod_revision)
}

/// A lock this process took (what is done with it: `took.rs`).
pub struct Took {
    pub key: String,
    pub owner: String,
    /// The lease its key is on.
    pub lease: i64,
    /// Its key's create revision.
    pub created: i64,
    /// The lease of the lock's run records when it was taken (0: none).
    pub runs: i64,
    /// How it was taken: only an exclusive holder hands the lock over to the next.
    pub sharing: Sharing,
    /// The record of its run, kept for the release to write (see
    /// [`LockStore::record_run_before_release`](crate::backend::store::LockStore::record_run_before_release)).
    pub record: Option<RunRecord>,
    /// The watch for the oldest waiter behind it, started as it was taken (exclusive only).
    pub next: Option<JoinHandle<Option<KeyValue>>>,
}

impl Drop for Took {
    /// A lock released another way (or forgotten) needs no watch for its next waiter.
    fn drop(&mut self) {
        if let Some(watch) = &self.next {
            watch.abort();
        }
    }
}
