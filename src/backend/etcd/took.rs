//! The locks this process took, kept so that their release needs no read first: an `exec`
//! frees its lock in one transaction that also writes the record of its run (one Raft
//! write fewer than writing it apart, and still before the next holder's), and leaves the
//! lease, on which nothing is left, to expire on its own. The next waiter, whom that
//! transaction hands the lock over to, is watched for while the holder's command runs, so
//! that the release is one round trip.

use std::sync::PoisonError;

use tokio::task::JoinHandle;

use super::client::Client;
use super::proto::KeyValue;
use super::recipe;
use super::store::{EtcdStore, Took};
use crate::backend::line::Meta;
use crate::backend::{now_ms, AcquireRequest, RunRecord};
use crate::error::Result;

impl EtcdStore {
    /// Notes that lease `id` took `req.key` for `req.owner`; `runs` is the lease of the
    /// lock's run records, `created` our key's create revision.
    pub(super) fn took(&self, req: &AcquireRequest, id: i64, runs: i64, created: i64) {
        let mut took = self.took.lock().unwrap_or_else(PoisonError::into_inner);
        took.retain(|t| (&t.key, &t.owner) != (&req.key, &req.owner));
        if took.len() >= 16 {
            took.remove(0);
        }
        took.push(Took {
            key: req.key.clone(),
            owner: req.owner.clone(),
            lease: id,
            created,
            runs,
            sharing: req.sharing,
            record: None,
            next: req
                .sharing
                .is_exclusive()
                .then(|| watch_next(self.client.clone(), self.dir(&req.key), created)),
        });
    }

    /// The lock `key` this process took for `owner`, forgotten as it is asked for.
    pub(super) fn took_lease(&self, key: &str, owner: &str) -> Option<Took> {
        let mut took = self.took.lock().unwrap_or_else(PoisonError::into_inner);
        let i = took.iter().position(|t| t.key == key && t.owner == owner)?;
        Some(took.remove(i))
    }

    /// Keeps `run` for the release of `key` when this process took it for the run's
    /// owner; false when it did not (the run is then written at once).
    pub(super) fn keep_record(&self, key: &str, run: &RunRecord) -> bool {
        let mut took = self.took.lock().unwrap_or_else(PoisonError::into_inner);
        match took
            .iter_mut()
            .find(|t| t.key == key && t.owner == run.owner)
        {
            Some(t) => {
                t.record = Some(run.clone());
                true
            }
            None => false,
        }
    }

    pub(super) async fn record_now(&self, key: &str, run: &RunRecord) -> Result<()> {
        super::runs::record(&self.client, &self.keep_alive, &self.prefix, key, run).await
    }

    /// Frees `key`, which lease `t.lease` took, writing the run kept for it in the same
    /// transaction, and hands it over to the next waiter if dlock's (see
    /// [`recipe::release`]); the lease is revoked only when the key was no longer there
    /// (then false, unless the lease still was).
    pub(super) async fn release_with_record(&self, key: &str, t: &mut Took) -> Result<bool> {
        let Some(run) = t.record.take() else {
            return self.client.revoke_found(t.lease).await;
        };
        let dir = self.dir(key);
        let ours = recipe::contender_key(&dir, t.lease);
        // A waiter the watch has not reported yet (or none) is not handed the lock: it takes
        // its turn.
        let next = match t.next.take() {
            Some(watch) if watch.is_finished() => watch.await.ok().flatten(),
            Some(watch) => {
                watch.abort();
                None
            }
            None => None,
        };
        let next = next.and_then(|kv| {
            // Only a waiter for this very lock (not for a lock named below it, `key/…`), and
            // dlock's: an `etcdctl lock` key (no JSON) is left alone, its owner takes its turn.
            // Shared holders and waiters hand nothing over: the next may hold already, or
            // beside others still there; each waiter stamps its own admission.
            if !recipe::contends(&dir, &kv) || !t.sharing.is_exclusive() {
                return None;
            }
            let mut meta = serde_json::from_slice::<Meta>(&kv.value).ok()?;
            if !meta.sharing.is_exclusive() {
                return None;
            }
            meta.token = None;
            meta.holder.acquired_at_ms = now_ms();
            Some((kv, meta.encode()))
        });
        let mut runs = t.runs;
        if runs == 0 {
            runs = super::runs::grant(&self.client).await?;
        }
        let txn = |runs, next: Option<&(KeyValue, Vec<u8>)>| {
            let mut records = super::runs::puts(&self.prefix, key, &run, runs);
            records.push(super::proclaim::forget(&self.prefix, key, t.lease));
            recipe::release(&ours, records, next.map(|(kv, v)| (kv, v.clone())))
        };
        let refresh = async {
            // The records vanish RUN_RECORD_TTL after the last run: each run refreshes them.
            if t.runs != 0 {
                let _ = self.keep_alive.lock().await.once(t.runs).await;
            }
        };
        let freed = self.client.txn_on_lease(txn(runs, next.as_ref()));
        let (freed, ()) = tokio::join!(freed, refresh);
        let mut freed = match freed? {
            Some(freed) => freed,
            // The records' lease expired since the acquisition read it.
            None => {
                runs = super::runs::grant(&self.client).await?;
                self.client.txn(txn(runs, next.as_ref())).await?
            }
        };
        if !freed.succeeded && next.is_some() && !recipe::range_kvs(&freed, 0).is_empty() {
            // Still ours, but the next waiter left meanwhile: freed without a hand-over.
            freed = self.client.txn(txn(runs, None)).await?;
        }
        if freed.succeeded {
            // Nothing is left on the lease: etcd ends it when its TTL runs out, and waiting
            // for a revoke would cost this process one more Raft write.
            return Ok(true);
        }
        self.client.revoke_found(t.lease).await
    }
}

/// Watches, in a task of its own, for the first contender for this very lock created after
/// revision `created` (a waiter there already is replayed): the waiter the release hands the
/// lock over to. One that comes later is behind it, and one that left is caught by the
/// release's check; a watch that fails only costs the hand-over.
fn watch_next(client: Client, dir: Vec<u8>, created: i64) -> JoinHandle<Option<KeyValue>> {
    tokio::spawn(async move {
        let mut watch = client.watch_stream();
        watch.create_prefix_puts(&dir, created + 1).await.ok()?;
        loop {
            let resp = watch.next().await.ok()?;
            if resp.canceled {
                return None;
            }
            let mut created_kvs = resp.events.into_iter().filter_map(|e| e.kv);
            let first = created_kvs.find(|kv| {
                kv.version == 1 && kv.create_revision > created && recipe::contends(&dir, kv)
            });
            if first.is_some() {
                return first;
            }
        }
    })
}
