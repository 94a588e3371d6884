//! The etcd store on the store seam ([`LockStore`]), built from the pieces of
//! [`super::store`], and the one wording of its errors: every error of an operation on a
//! key names the key and the cluster.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::recipe;
use super::store::{whole_seconds, EtcdStore, EtcdWaiter};
use crate::backend::line::Contender;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord, Sharing,
};
use crate::error::{Error, Result};

impl EtcdStore {
    /// `e`, met while `doing` lock `key`, worded as every error of an operation on a key
    /// is: `cannot DOING lock 'KEY' on CLUSTER: what failed`, of the same kind. The lock's
    /// own answers, which say so already (held, gone, refused), are left as they are.
    pub(super) fn on_key(&self, doing: &str, key: &str, e: Error) -> Error {
        let (lock, name) = (format!("lock '{key}'"), self.name.as_str());
        let said = e.to_string();
        if said.contains(&lock) && said.contains(name) {
            return e;
        }
        e.map_message(|m| {
            let what = m.strip_prefix(&format!("{name}: ")).unwrap_or(&m);
            format!("cannot {doing} {lock} on {name}: {what}")
        })
    }
}

#[async_trait]
impl LockStore for EtcdStore {
    type Waiter = EtcdWaiter;

    fn describe(&self) -> String {
        self.name.clone()
    }

    /// Every mode: each contender says in its key how it holds (see [`crate::backend::line`]).
    fn supports(&self, _sharing: Sharing) -> bool {
        true
    }

    fn queue_order(&self) -> Option<&'static str> {
        Some(crate::backend::ORDER_ETCD)
    }

    async fn begin(&self, _req: &AcquireRequest) -> Result<EtcdWaiter> {
        Ok(EtcdWaiter::default())
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut EtcdWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        let done: Result<Attempt> = async {
            // The answer stands when the revoke of a lease we no longer need fails (it was
            // tried again already): the lease, and a key left on it, expire by themselves.
            if let Some(acquired) = self.reenter(req).await? {
                if let Some(g) = w.lease.take() {
                    let _ = self.client.revoke(g.id).await;
                }
                return Ok(Attempt::Granted(acquired));
            }
            let attempt = self.enter(req, w).await?;
            if matches!(attempt, Attempt::Busy(_)) && !enqueue {
                if let Some(g) = w.lease.take() {
                    let _ = self.client.revoke(g.id).await;
                }
                w.queued_at = None;
            }
            Ok(attempt)
        }
        .await;
        done.map_err(|e| self.on_key("acquire", &req.key, e))
    }

    async fn sleep(
        &self,
        req: &AcquireRequest,
        w: &mut EtcdWaiter,
        _busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        let done: Result<Woken> = async {
            if !self.refresh(w).await? {
                return Ok(Woken::Again);
            }
            match (w.queued_at, &w.lease) {
                (Some(_), Some(g)) if !req.sharing.is_exclusive() => {
                    let pause = pause.min(g.ttl / 3);
                    self.await_release(&req.key, w.seen, pause).await?;
                }
                (Some(rev), Some(g)) => {
                    let pause = pause.min(g.ttl / 3);
                    let ours = recipe::contender_key(&self.dir(&req.key), g.id);
                    w.handed = self.await_turn(&req.key, &ours, rev, pause).await?;
                }
                _ => {
                    let pause = crate::backend::waiting::backoff(round).min(pause);
                    tokio::time::sleep(pause).await;
                }
            }
            Ok(Woken::Again)
        }
        .await;
        done.map_err(|e| self.on_key("wait for", &req.key, e))
    }

    async fn leave(&self, _req: &AcquireRequest, w: EtcdWaiter) {
        if let Some(g) = w.lease {
            let _ = self.client.revoke(g.id).await;
        }
    }

    /// A keep-alive: the lease runs its granted TTL again. An etcd lease keeps that TTL
    /// for life, so a longer one is refused rather than silently shortened.
    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let done: Result<Lease> = async {
            let (entries, _) = self.entries(key).await?;
            let holder = self.held_by(&entries, "renew", key, owner)?;
            let granted = self.client.time_to_live(holder.kv.lease).await?.granted_ttl;
            if whole_seconds(ttl) > granted {
                return Err(Error::Usage(format!(
                    "cannot renew lock '{key}' on {} for {ttl:?}: an etcd lease keeps the TTL it was granted with ({granted}s); acquire it with the longer --ttl",
                    self.name
                )));
            }
            let sent = Instant::now();
            let left = self.keep_alive.lock().await.once(holder.kv.lease).await?;
            if left <= 0 {
                return Err(Error::lease_gone("renew", key, &self.name));
            }
            Ok(self.lease_of(holder, key, Duration::from_secs(left as u64), sent))
        }
        .await;
        done.map_err(|e| self.on_key("renew", key, e))
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let done: Result<Released> = async {
            if let (ReleaseMode::All, Some(mut took)) = (mode, self.took_lease(key, owner)) {
                // The lease that took the lock holds it until it is revoked or expires.
                if !self.release_with_record(key, &mut took).await? {
                    return Err(Error::lease_gone("release", key, &self.name));
                }
                return Ok(Released {
                    previous_owner: Some(owner.to_string()),
                    still_held: false,
                });
            }
            let (entries, _) = self.entries(key).await?;
            if mode == ReleaseMode::Force {
                return self.free_all(&entries).await;
            }
            let holder = self.held_by(&entries, "release", key, owner)?;
            let previous_owner = Some(holder.meta.owner.clone());
            if mode == ReleaseMode::One && holder.meta.depth > 1 {
                let mut meta = holder.meta.clone();
                meta.depth -= 1;
                meta.token = Some(holder.token());
                let value = meta.encode();
                let txn = recipe::rewrite(&holder.kv.key, holder.kv.mod_revision, value.clone());
                let done = self.client.txn(txn).await?;
                if recipe::written_at(&done, &value, 0).is_some() {
                    return Ok(Released {
                        previous_owner,
                        still_held: true,
                    });
                }
                return Err(Error::lease_gone("release", key, &self.name));
            }
            self.client.revoke(holder.kv.lease).await?;
            Ok(Released {
                previous_owner,
                still_held: false,
            })
        }
        .await;
        done.map_err(|e| self.on_key("release", key, e))
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        self.key_status(keys).await
    }

    fn heartbeat(&self) -> Duration {
        Duration::from_secs(5)
    }

    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let (key, owner) = (&acquired.lease.key, &acquired.lease.owner);
        let held = self.linger_key(key, owner, left).await;
        held.map_err(|e| self.on_key("hold", key, e))
    }

    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        let watched = self.watch_keys(keys, pause).await;
        let first = keys.first().map_or("", String::as_str);
        watched.map_err(|e| self.on_key("watch", first, e))
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        let recorded = self.record_now(key, run).await;
        recorded.map_err(|e| self.on_key("record the run of", key, e))
    }

    /// The run of a lock this process took is kept for its release, which writes it in
    /// the transaction that frees the lock: still before the next holder's, and one write
    /// fewer. Any other run is written at once.
    async fn record_run_before_release(&self, key: &str, run: &RunRecord) -> Result<()> {
        if self.keep_record(key, run) {
            return Ok(());
        }
        LockStore::record_run(self, key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        let read = super::runs::read(&self.client, &self.prefix, key).await;
        read.map_err(|e| self.on_key("read the last runs of", key, e))
    }
}
