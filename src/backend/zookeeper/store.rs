//! The ZooKeeper [`LockStore`]: Curator's `InterProcessMutex` recipe on the store seam.
//!
//! A lease of `dlock exec` is an ephemeral sequential node on a session of its own, whose
//! timeout is `--ttl`: it ends when the process dies or is cut off for that long. A lease
//! of `dlock lock` must outlive the process, which no session does: it is a persistent
//! TTL node (servers started with `zookeeper.extendedTypesEnabled=true`) whose expiry dlock
//! writes into the node and honours itself, since the server reaps TTL nodes only now and
//! then. Each waiter watches only the contender just before it. The fencing token is the
//! zxid of the write that stamps the holder's node once its predecessors are gone: later
//! than every earlier holder's release, and zxids grow across leader changes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use zookeeper_client::{Client, CreateMode, Error as ZkError};

use super::layout::{self, Entry, Meta};
use super::queue::{self, Line};
use super::session::{self, acls, unavailable};
use super::url::Target;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    now_ms, AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
};
use crate::error::{Error, Result};

/// The timeout of the store's own session (status, release, detached leases).
const STORE_SESSION: Duration = Duration::from_secs(10);

/// A connection to one ZooKeeper ensemble.
pub struct ZkStore {
    pub(super) target: Target,
    pub(super) client: Client,
    /// The session and node of each `exec` lease this process holds, by owner:
    /// renewals ask that session.
    sessions: Mutex<HashMap<String, (Client, String)>>,
}

/// One acquisition: its own session (`exec`), its node once queued, the node before it.
pub struct ZkWaiter {
    session: Option<Client>,
    node: Option<String>,
    /// The zxid that created our node.
    created: i64,
    predecessor: Option<String>,
    /// When a detached waiter's node last had its expiry moved.
    refreshed: Instant,
    /// When the request that created our node was sent.
    sent: Instant,
}

impl ZkStore {
    /// Connects to the ensemble a `zk://` URL names.
    pub async fn connect(target: Target) -> Result<ZkStore> {
        let client = session::connect(&target, STORE_SESSION).await?;
        Ok(ZkStore {
            target,
            client,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.target.name
    }

    pub(super) fn path(&self, key: &str) -> Result<String> {
        layout::lock_path(key).map_err(|why| {
            Error::Usage(format!("bad lock name '{key}' for {}: {why}", self.name()))
        })
    }

    pub(super) fn fail(&self, key: &str, e: ZkError) -> Error {
        unavailable(self.name(), &format!("lock '{key}'"), e)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Client, String)>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn line(&self, key: &str, sweep: bool) -> Result<(String, Line)> {
        let path = self.path(key)?;
        let line = queue::read(&self.client, &path, sweep, None)
            .await
            .map_err(|e| self.fail(key, e))?;
        Ok((path, line))
    }

    fn lease(&self, key: &str, owner: &str, token: u64, ttl: Duration, sent_at: Instant) -> Lease {
        Lease::timed(key, owner, token, ttl, false, sent_at)
    }

    /// Re-enters `key` when one of `req.reenter` holds it: one level deeper, same token.
    async fn reenter(&self, req: &AcquireRequest) -> Result<Option<Acquired>> {
        if req.reenter.is_empty() {
            return Ok(None);
        }
        let sent = Instant::now();
        let (path, line) = self.line(&req.key, true).await?;
        let Some(h) = line.holder() else {
            return Ok(None);
        };
        if h.foreign || !req.reenter.iter().any(|o| h.owned_by(o)) {
            return Ok(None);
        }
        let mut meta = h.meta.clone();
        meta.depth += 1;
        meta.token = Some(h.token());
        let node = format!("{path}/{}", h.name);
        match self
            .client
            .set_data(&node, &meta.encode(), Some(h.version))
            .await
        {
            Ok(_) => {}
            Err(ZkError::BadVersion | ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(self.fail(&req.key, e)),
        }
        let ttl = match h.ttl_left_ms() {
            Some(ms) => Duration::from_millis(ms),
            None => self.session_ttl(&meta.owner).unwrap_or(req.ttl),
        };
        let mut lease = self.lease(&req.key, &meta.owner, h.token(), ttl, sent);
        lease.reentered = true;
        Ok(Some(Acquired { lease, guard: None }))
    }

    /// The lease a session of `owner` held here gives.
    fn session_ttl(&self, owner: &str) -> Option<Duration> {
        let sessions = self.sessions();
        sessions
            .get(owner)
            .map(|(c, _)| session::lease_ttl(c.session_timeout()))
    }

    /// Queues a new node for `req`: ephemeral on the waiter's session, or a persistent TTL
    /// node for a detached lease.
    async fn enter(&self, req: &AcquireRequest, w: &mut ZkWaiter, path: &str) -> Result<()> {
        let meta = Meta {
            owner: req.owner.clone(),
            depth: 1,
            token: None,
            expires_at_ms: req.detached.then(|| now_ms() + req.ttl.as_millis() as u64),
            holder: crate::backend::Holder {
                acquired_at_ms: now_ms(),
                ..req.holder.clone()
            },
        };
        let uuid = crate::holder::new_owner_id();
        let prefix = layout::node_prefix(path, &uuid);
        let acl = acls(&self.target);
        let parents = CreateMode::Container.with_acls(acl);
        let (client, options) = match &w.session {
            Some(s) => (s, CreateMode::EphemeralSequential.with_acls(acl)),
            None => {
                let ttl = req.ttl.max(Duration::from_millis(1));
                (
                    &self.client,
                    CreateMode::PersistentSequential
                        .with_acls(acl)
                        .with_ttl(ttl),
                )
            }
        };
        w.sent = Instant::now();
        let created = queue::create(client, &prefix, &meta.encode(), &options, &parents).await;
        match created {
            Ok((node, stat)) => {
                w.node = Some(node);
                w.created = stat.czxid;
                w.refreshed = Instant::now();
                Ok(())
            }
            Err(ZkError::Unimplemented) if req.detached => Err(self.no_ttl_nodes(&req.key)),
            Err(e) => Err(self.fail(&req.key, e)),
        }
    }

    fn no_ttl_nodes(&self, key: &str) -> Error {
        Error::Usage(format!(
            "cannot take lock '{key}' on {} for longer than this process: a ZooKeeper session ends with its process, and this ensemble has TTL nodes disabled (start its servers with -Dzookeeper.extendedTypesEnabled=true), or use dlock exec",
            self.name()
        ))
    }

    /// Stamps our node now that it holds: the zxid of this write is the fencing token.
    async fn stamp(&self, req: &AcquireRequest, w: &ZkWaiter, node: &str) -> Result<Acquired> {
        let client = w.session.as_ref().unwrap_or(&self.client);
        let ttl = match &w.session {
            Some(s) => session::lease_ttl(s.session_timeout()),
            None => req.ttl,
        };
        let meta = Meta {
            owner: req.owner.clone(),
            depth: 1,
            token: None,
            expires_at_ms: req.detached.then(|| now_ms() + req.ttl.as_millis() as u64),
            holder: crate::backend::Holder {
                acquired_at_ms: now_ms(),
                ..req.holder.clone()
            },
        };
        let sent = Instant::now();
        let stat = match client.set_data(node, &meta.encode(), None).await {
            Ok(stat) => stat,
            Err(ZkError::NoNode) => return Err(self.node_gone(&req.key)),
            Err(e) => return Err(self.fail(&req.key, e)),
        };
        let lease = self.lease(&req.key, &req.owner, stat.mzxid as u64, ttl, sent);
        Ok(Acquired { lease, guard: None })
    }

    fn node_gone(&self, key: &str) -> Error {
        Error::Unavailable(format!(
            "{}: lock '{key}': our node vanished (its session or TTL expired?)",
            self.name()
        ))
    }

    /// Deletes the waiter's node, if it has one.
    async fn drop_node(&self, w: &mut ZkWaiter) {
        if let Some(node) = w.node.take() {
            let client = w.session.as_ref().unwrap_or(&self.client);
            let _ = client.delete(&node, None).await;
        }
        w.predecessor = None;
    }

    /// One look at the line with our node in it: granted, or busy behind someone.
    async fn look(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        enqueue: bool,
    ) -> Result<Option<Attempt>> {
        let path = self.path(&req.key)?;
        if w.node.is_none() && !enqueue {
            // Not queueing: a lock already held is refused without a node of ours.
            let (_, line) = self.line(&req.key, true).await?;
            if let Some(n) = line.entries.len().checked_sub(1) {
                return Ok(Some(Attempt::Busy(busy_behind(req, &line, None, n))));
            }
        }
        if w.node.is_none() {
            self.enter(req, w, &path).await?;
        }
        let node = w.node.clone().unwrap_or_default();
        let name = node.rsplit('/').next().unwrap_or_default();
        let client = w.session.as_ref().unwrap_or(&self.client);
        let line = queue::read(client, &path, true, Some(name))
            .await
            .map_err(|e| self.fail(&req.key, e))?;
        let Some(behind) = line.ours else {
            w.node = None; // expired meanwhile: queue again
            return Ok(None);
        };
        if line.entries.is_empty() {
            let unchanged = line.first && line.pzxid == w.created;
            let acquired = self.granted(req, w, &node, unchanged).await?;
            if let Some(s) = w.session.take() {
                self.sessions().insert(req.owner.clone(), (s, node));
            }
            return Ok(Some(Attempt::Granted(acquired)));
        }
        let place = line.entries.len();
        w.predecessor = Some(format!("{path}/{}", line.entries[place - 1].name));
        let waiters = place + behind - usize::from(!enqueue);
        let busy = busy_behind(req, &line, enqueue.then_some(place as u64), waiters);
        if !enqueue {
            self.drop_node(w).await;
        }
        Ok(Some(Attempt::Busy(busy)))
    }

    /// Our node holds. When it came first and no contender came or went since we created
    /// it (`unchanged`: the children's pzxid is our create), no one was before us then:
    /// every earlier holder had left before our create, whose zxid is then the token.
    /// Else the node is stamped, and the zxid of that write is.
    async fn granted(
        &self,
        req: &AcquireRequest,
        w: &ZkWaiter,
        node: &str,
        unchanged: bool,
    ) -> Result<Acquired> {
        if !unchanged || w.created <= 0 {
            return self.stamp(req, w, node).await;
        }
        let ttl = match &w.session {
            Some(s) => session::lease_ttl(s.session_timeout()),
            None => req.ttl,
        };
        let sent = w.sent;
        let lease = self.lease(&req.key, &req.owner, w.created as u64, ttl, sent);
        Ok(Acquired { lease, guard: None })
    }

    /// Moves a detached waiter's expiry on, so that it keeps its place while it waits.
    async fn refresh(&self, req: &AcquireRequest, w: &mut ZkWaiter) -> Result<()> {
        let (true, Some(node)) = (req.detached, &w.node) else {
            return Ok(());
        };
        if w.refreshed.elapsed() < req.ttl / 3 {
            return Ok(());
        }
        let (data, stat) = match self.client.get_data(node).await {
            Ok(found) => found,
            Err(ZkError::NoNode) => return Ok(()),
            Err(e) => return Err(self.fail(&req.key, e)),
        };
        let mut meta = Entry::read("", &data, &stat).meta;
        meta.expires_at_ms = Some(now_ms() + req.ttl.as_millis() as u64);
        let _ = self
            .client
            .set_data(node, &meta.encode(), Some(stat.version))
            .await;
        w.refreshed = Instant::now();
        Ok(())
    }

    /// Ends the session of `owner`'s lease, if this process holds it.
    fn end_session(&self, owner: &str) {
        let session = self.sessions().remove(owner);
        drop(session);
    }

    /// The holder of `key`, checked against `owner` as `verb` needs.
    fn holder_for<'l>(
        &self,
        verb: &str,
        key: &str,
        owner: &str,
        line: &'l Line,
    ) -> Result<&'l Entry> {
        match line.holder() {
            Some(h) if h.owned_by(owner) => Ok(h),
            Some(_) => Err(Error::held_by_other(verb, key, self.name(), owner)),
            None => Err(Error::lease_gone(verb, key, self.name())),
        }
    }

    /// Renews a session lease this process holds: its own session answers (one round
    /// trip), so the session was alive when the request was sent.
    async fn check_session(&self, key: &str, owner: &str) -> Option<Result<Lease>> {
        let (client, node) = self.sessions().get(owner).cloned()?;
        if session::ended(&client) {
            return Some(Err(Error::lease_gone("renew", key, self.name())));
        }
        let sent = Instant::now();
        Some(match client.get_data(&node).await {
            Ok((data, stat)) => {
                let entry = Entry::read("", &data, &stat);
                let ttl = session::lease_ttl(client.session_timeout());
                Ok(self.lease(key, owner, entry.token(), ttl, sent))
            }
            Err(ZkError::NoNode | ZkError::SessionExpired) => {
                Err(Error::lease_gone("renew", key, self.name()))
            }
            Err(e) => Err(self.fail(key, e)),
        })
    }
}

/// What a refused attempt reports: the holder, our place when we queue, and how many
/// wait (`waiters`, counting us only when we stay in line).
fn busy_behind(req: &AcquireRequest, line: &Line, position: Option<u64>, waiters: usize) -> Busy {
    let holder = &line.entries[0];
    Busy {
        holder: Some(holder.info(&req.key)),
        position,
        waiters: Some(waiters as u64),
        retry: holder.ttl_left_ms().map(Duration::from_millis),
    }
}

#[async_trait]
impl LockStore for ZkStore {
    type Waiter = ZkWaiter;

    fn describe(&self) -> String {
        self.target.name.clone()
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<ZkWaiter> {
        self.path(&req.key)?;
        let session = match req.detached {
            true => None,
            false => {
                let client = session::connect(&self.target, req.ttl).await?;
                session::check_negotiated(self.name(), &req.key, req.ttl, &client);
                Some(client)
            }
        };
        Ok(ZkWaiter {
            session,
            node: None,
            created: 0,
            predecessor: None,
            refreshed: Instant::now(),
            sent: Instant::now(),
        })
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        if let Some(acquired) = self.reenter(req).await? {
            self.drop_node(w).await;
            return Ok(Attempt::Granted(acquired));
        }
        if let Some(attempt) = self.look(req, w, enqueue).await? {
            return Ok(attempt);
        }
        match self.look(req, w, enqueue).await? {
            Some(attempt) => Ok(attempt),
            None => Err(self.node_gone(&req.key)),
        }
    }

    async fn sleep(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        _busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        self.refresh(req, w).await?;
        let Some(pred) = w.predecessor.clone() else {
            let pause = crate::backend::waiting::backoff(round).min(pause);
            tokio::time::sleep(pause).await;
            return Ok(Woken::Again);
        };
        let pause = match req.detached {
            true => pause.min(req.ttl / 3),
            false => pause,
        };
        let client = w.session.as_ref().unwrap_or(&self.client);
        let (stat, watcher) = client
            .check_and_watch_stat(&pred)
            .await
            .map_err(|e| self.fail(&req.key, e))?;
        if stat.is_some() {
            let _ = tokio::time::timeout(pause, watcher.changed()).await;
        }
        Ok(Woken::Again)
    }

    async fn leave(&self, _req: &AcquireRequest, mut w: ZkWaiter) {
        self.drop_node(&mut w).await;
    }

    /// A detached lease moves its expiry; a session lease asks its session, which keeps
    /// itself alive: the lease lasts as long as the session, whatever `ttl` says.
    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        if let Some(checked) = self.check_session(key, owner).await {
            return checked;
        }
        let (path, line) = self.line(key, true).await?;
        let h = self.holder_for("renew", key, owner, &line)?;
        let node = format!("{path}/{}", h.name);
        if h.meta.expires_at_ms.is_none() {
            // Another process's session (a nested exec re-entered it): that process keeps
            // it alive; all this one can tell is that it still holds.
            let sent = Instant::now();
            return Ok(self.lease(key, owner, h.token(), ttl, sent));
        }
        let mut meta = h.meta.clone();
        meta.token = Some(h.token());
        meta.expires_at_ms = Some(now_ms() + ttl.as_millis() as u64);
        let sent = Instant::now();
        match self
            .client
            .set_data(&node, &meta.encode(), Some(h.version))
            .await
        {
            Ok(_) => Ok(self.lease(key, owner, h.token(), ttl, sent)),
            Err(ZkError::BadVersion | ZkError::NoNode) => {
                Err(Error::lease_gone("renew", key, self.name()))
            }
            Err(e) => Err(self.fail(key, e)),
        }
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let (path, line) = self.line(key, true).await?;
        let h = match (line.holder(), mode) {
            (None, ReleaseMode::Force) => {
                return Ok(Released {
                    previous_owner: None,
                    still_held: false,
                })
            }
            (Some(h), ReleaseMode::Force) => h,
            _ => self.holder_for("release", key, owner, &line)?,
        };
        let node = format!("{path}/{}", h.name);
        let previous_owner = Some(h.meta.owner.clone());
        if mode == ReleaseMode::One && h.meta.depth > 1 {
            let mut meta = h.meta.clone();
            meta.depth -= 1;
            meta.token = Some(h.token());
            return match self
                .client
                .set_data(&node, &meta.encode(), Some(h.version))
                .await
            {
                Ok(_) => Ok(Released {
                    previous_owner,
                    still_held: true,
                }),
                Err(ZkError::BadVersion | ZkError::NoNode) => {
                    Err(Error::lease_gone("release", key, self.name()))
                }
                Err(e) => Err(self.fail(key, e)),
            };
        }
        match self.client.delete(&node, None).await {
            Ok(()) | Err(ZkError::NoNode) => {}
            Err(e) => return Err(self.fail(key, e)),
        }
        self.end_session(&h.meta.owner);
        Ok(Released {
            previous_owner,
            still_held: false,
        })
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let names = match keys {
            [] => self.lock_keys().await?,
            named => named.to_vec(),
        };
        let mut all = Vec::new();
        for key in names {
            let (_, line) = self.line(&key, false).await?;
            let lock = line.holder().map(|h| h.info(&key));
            if keys.is_empty() && lock.is_none() {
                continue;
            }
            let waiters = line.entries.iter().skip(1).map(Entry::waiter).collect();
            all.push(KeyStatus {
                key,
                lock,
                waiters: Some(waiters),
                servers: None,
                holders: Vec::new(),
                sharing: crate::backend::Sharing::Exclusive,
            });
        }
        Ok(all)
    }

    fn heartbeat(&self) -> Duration {
        Duration::from_secs(5)
    }

    /// A session lease cannot outlive this process: `exec` stays (CMD already done) until
    /// the time is up, then releases. A detached lease is renewed to `left`.
    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let lease = &acquired.lease;
        let ends_with_us = self.sessions().contains_key(&lease.owner);
        if !ends_with_us {
            self.renew(&lease.key, &lease.owner, left).await?;
            return Ok(());
        }
        tokio::time::sleep(left).await;
        self.release(&lease.key, &lease.owner, ReleaseMode::All)
            .await
            .map(drop)
    }

    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        self.watch_keys(keys, pause).await
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        self.write_run(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        self.read_runs(key).await
    }
}
