//! The ZooKeeper [`LockStore`]: Curator's `InterProcessMutex` recipe on the store seam.
//!
//! A lease of `dlock exec` is an ephemeral sequential node on a session of its own, whose
//! timeout is `--ttl`: it ends when the process dies or is cut off for that long, and it
//! carries the store's other requests of that run too (one connection per process). A lease
//! of `dlock lock` must outlive the process, which no session does: it is a persistent
//! TTL node (servers started with `zookeeper.extendedTypesEnabled=true`) whose expiry dlock
//! writes into the node and honours itself, since the server reaps TTL nodes only now and
//! then. An exclusive waiter watches only the contender just before it; shared and
//! semaphore contenders hold together as [`crate::backend::line`] says. The fencing token is the
//! zxid of the write that stamps a holder's node once it is admitted: later than every
//! earlier holder's release, distinct for holders admitted together, and zxids grow
//! across leader changes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use zookeeper_client::{Client, CreateMode, Error as ZkError};

use super::layout::{self, Entry};
use super::line::{self, Line};
use super::session::{self, acls, unavailable};
use super::url::Target;
use crate::backend::line::{status as line_status, Contender};
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    now_ms, AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
    Sharing,
};
use crate::error::{Error, Result};

/// The timeout of the store's own session (status, release, detached leases).
const STORE_SESSION: Duration = Duration::from_secs(10);

/// One ZooKeeper ensemble, over one session at a time (see [`session::Current`]).
pub struct ZkStore {
    pub(super) target: Target,
    pub(super) current: session::Current,
    /// The session and node of each `exec` lease this process holds, by owner:
    /// renewals ask that session.
    sessions: Mutex<HashMap<String, (Client, String)>>,
}

/// What a waiter sleeps on until it may be admitted.
#[derive(Debug, Clone)]
pub enum Watch {
    /// The node that blocks it: its deletion may admit us.
    Node(String),
    /// The lock's children, as they were at `pzxid`: any holder leaving may admit us.
    Line { path: String, pzxid: i64 },
}

/// One acquisition: its own session (`exec`), its node once queued, what blocks it.
pub struct ZkWaiter {
    pub(super) session: Option<Client>,
    pub(super) node: Option<String>,
    /// The zxid that created our node.
    pub(super) created: i64,
    pub(super) blocker: Option<Watch>,
    /// When a detached waiter's node last had its expiry moved.
    refreshed: Instant,
    /// When the request that created our node was sent.
    pub(super) sent: Instant,
    /// The protection id of a create whose answer was lost: the node may exist, and is
    /// found by it before another is made.
    pub(super) lost_create: Option<String>,
}

impl ZkStore {
    /// The ensemble a `zk://` URL names; connected on first use, so that an `exec`
    /// connects once, for its lease.
    pub fn new(target: Target) -> ZkStore {
        ZkStore {
            target,
            current: session::Current::default(),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// The session to send a request about `key` on (empty: none): the one in use, else
    /// a new session of the store's own.
    pub(super) async fn client(&self, key: &str) -> Result<Client> {
        if let Some(client) = self.current.live() {
            return Ok(client);
        }
        let client = session::connect(&self.target, STORE_SESSION, key).await?;
        Ok(self.current.adopt(client))
    }

    /// The session of `w`'s requests: its own (`exec`), else the store's.
    pub(super) async fn client_of(&self, w: &ZkWaiter, key: &str) -> Result<Client> {
        match &w.session {
            Some(s) => Ok(s.clone()),
            None => self.client(key).await,
        }
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

    pub(super) fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Client, String)>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) async fn line(&self, key: &str, sweep: bool) -> Result<(String, Line)> {
        let path = self.path(key)?;
        let line = line::read(&self.client(key).await?, &path, sweep, None)
            .await
            .map_err(|e| self.fail(key, e))?;
        Ok((path, line))
    }

    pub(super) fn lease(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
        sent_at: Instant,
    ) -> Lease {
        Lease::timed(key, owner, token, ttl, false, sent_at)
    }

    /// Re-enters `key` when one of `req.reenter` holds it: one level deeper, same token.
    async fn reenter(&self, req: &AcquireRequest) -> Result<Option<Acquired>> {
        if req.reenter.is_empty() {
            return Ok(None);
        }
        let sent = Instant::now();
        let (path, line) = self.line(&req.key, true).await?;
        let mine = |h: &&Entry| !h.foreign && req.reenter.iter().any(|o| h.owned_by(o));
        let Some(h) = line.holding().iter().find(mine) else {
            return Ok(None);
        };
        let mut meta = h.meta.clone();
        meta.depth += 1;
        meta.token = Some(h.token());
        let node = format!("{path}/{}", h.name);
        let client = self.client(&req.key).await?;
        match client
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
    pub(super) async fn enter(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        path: &str,
    ) -> Result<()> {
        let client = self.client_of(w, &req.key).await?;
        if self.found_lost_create(&client, req, w, path).await? {
            return Ok(());
        }
        let meta = layout::fresh_meta(req);
        let uuid = w.lost_create.take().unwrap_or_else(layout::protection_id);
        let prefix = layout::node_prefix(path, &uuid, req.sharing);
        let acl = acls(&self.target);
        let parents = CreateMode::Container.with_acls(acl);
        let options = match &w.session {
            Some(_) => CreateMode::EphemeralSequential.with_acls(acl),
            None => {
                let ttl = req.ttl.max(Duration::from_millis(1));
                CreateMode::PersistentSequential
                    .with_acls(acl)
                    .with_ttl(ttl)
            }
        };
        w.sent = Instant::now();
        let created = line::create(&client, &prefix, &meta.encode(), &options, &parents).await;
        match created {
            Ok((node, stat)) => {
                w.node = Some(node);
                w.created = stat.czxid;
                w.refreshed = Instant::now();
                Ok(())
            }
            Err(ZkError::Unimplemented) if req.detached => Err(self.no_ttl_nodes(&req.key)),
            Err(e) => {
                let e = self.fail(&req.key, e);
                if e.is_retryable() {
                    w.lost_create = Some(uuid);
                }
                Err(e)
            }
        }
    }

    /// Curator's protected mode: after a create whose answer was lost, our node is looked
    /// for by its protection id, so that a lost answer never leaves a node of ours in line
    /// (ahead of us, as long as our session lives). True when it was found, and is ours.
    async fn found_lost_create(
        &self,
        client: &Client,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        path: &str,
    ) -> Result<bool> {
        let Some(uuid) = &w.lost_create else {
            return Ok(false);
        };
        let mine = format!("{}{uuid}", layout::PROTECTED);
        let children = match client.list_children(path).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(false),
            Err(e) => return Err(self.fail(&req.key, e)),
        };
        let Some(name) = children.into_iter().find(|c| c.starts_with(&mine)) else {
            return Ok(false);
        };
        let node = format!("{path}/{name}");
        match client.check_stat(&node).await {
            Ok(Some(stat)) => {
                (w.node, w.created) = (Some(node), stat.czxid);
                (w.refreshed, w.lost_create) = (Instant::now(), None);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(self.fail(&req.key, e)),
        }
    }

    fn no_ttl_nodes(&self, key: &str) -> Error {
        Error::Usage(format!(
            "cannot take lock '{key}' on {} for longer than this process: a ZooKeeper session ends with its process, and this ensemble has TTL nodes disabled (start its servers with -Dzookeeper.extendedTypesEnabled=true), or use dlock exec",
            self.name()
        ))
    }

    /// Moves a detached waiter's expiry on, so that it keeps its place while it waits.
    async fn refresh(&self, req: &AcquireRequest, w: &mut ZkWaiter) -> Result<()> {
        let (true, Some(node)) = (req.detached, &w.node) else {
            return Ok(());
        };
        if w.refreshed.elapsed() < req.ttl / 3 {
            return Ok(());
        }
        let client = self.client(&req.key).await?;
        let (data, stat) = match client.get_data(node).await {
            Ok(found) => found,
            Err(ZkError::NoNode) => return Ok(()),
            Err(e) => return Err(self.fail(&req.key, e)),
        };
        let mut meta = Entry::read("", &data, &stat).meta;
        meta.own.expires_at_ms = Some(now_ms() + req.ttl.as_millis() as u64);
        let _ = client
            .set_data(node, &meta.encode(), Some(stat.version))
            .await;
        w.refreshed = Instant::now();
        Ok(())
    }

    /// Ends the session of `owner`'s lease, if this process holds it: it closes when the
    /// last request on it (the caller's) is done.
    fn end_session(&self, owner: &str) {
        if let Some((client, _)) = self.sessions().remove(owner) {
            self.current.forget(&client);
        }
    }

    /// Deletes the nodes of `holders` (every holder, for `unlock --force`); the first is
    /// the previous owner. One session deletes them all, even when it is the lease of one.
    async fn free(&self, key: &str, path: &str, holders: &[Entry]) -> Result<Released> {
        let client = self.client(key).await?;
        for h in holders {
            let node = format!("{path}/{}", h.name);
            match client.delete(&node, None).await {
                Ok(()) | Err(ZkError::NoNode) => {}
                Err(e) => return Err(self.fail(key, e)),
            }
            self.end_session(&h.meta.owner);
        }
        Ok(Released {
            previous_owner: holders.first().map(|h| h.meta.owner.clone()),
            still_held: false,
        })
    }

    /// A holder of `key`, checked against `owner` as `verb` needs.
    fn holder_for<'l>(
        &self,
        verb: &str,
        key: &str,
        owner: &str,
        line: &'l Line,
    ) -> Result<&'l Entry> {
        let holding = line.holding();
        match holding.iter().find(|h| h.owned_by(owner)) {
            Some(h) => Ok(h),
            None if holding.is_empty() => Err(Error::lease_gone(verb, key, self.name())),
            None => Err(Error::held_by_other(verb, key, self.name(), owner)),
        }
    }

    /// Renews a session lease this process holds: its own session answers (one round
    /// trip), so the session was alive when the request was sent.
    async fn check_session(&self, key: &str, owner: &str) -> Option<Result<Lease>> {
        let (client, node) = self.sessions().get(owner).cloned()?;
        if session::ended(&client) {
            self.current.forget(&client);
            return Some(Err(Error::lease_gone("renew", key, self.name())));
        }
        let sent = Instant::now();
        Some(match client.get_data(&node).await {
            Ok((data, stat)) => {
                let entry = Entry::read("", &data, &stat);
                let ttl = session::lease_ttl(client.session_timeout());
                Ok(self.lease(key, owner, entry.token(), ttl, sent))
            }
            Err(ZkError::NoNode) => Err(Error::lease_gone("renew", key, self.name())),
            Err(ZkError::SessionExpired) => {
                // Whatever the client's state says yet, the run record goes over a new
                // session.
                self.current.forget(&client);
                Err(Error::lease_gone("renew", key, self.name()))
            }
            Err(e) => Err(self.fail(key, e)),
        })
    }
}

#[async_trait]
impl LockStore for ZkStore {
    type Waiter = ZkWaiter;

    fn describe(&self) -> String {
        self.target.name.clone()
    }

    /// Every mode: a contender's name says how it holds the key (see [`crate::backend::line`]).
    fn supports(&self, _sharing: Sharing) -> bool {
        true
    }

    fn queue_order(&self) -> Option<&'static str> {
        Some(crate::backend::ORDER_ZOOKEEPER)
    }

    async fn begin(&self, req: &AcquireRequest) -> Result<ZkWaiter> {
        self.path(&req.key)?;
        let session = match req.detached {
            true => None,
            false => {
                let client = session::connect(&self.target, req.ttl, &req.key).await?;
                session::check_negotiated(self.name(), &req.key, req.ttl, &client);
                self.current.adopt(client.clone());
                Some(client)
            }
        };
        Ok(ZkWaiter {
            session,
            node: None,
            created: 0,
            blocker: None,
            refreshed: Instant::now(),
            sent: Instant::now(),
            lost_create: None,
        })
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        self.revive(req, w).await?;
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
        let Some(watch) = w.blocker.clone() else {
            let pause = crate::backend::waiting::backoff(round).min(pause);
            tokio::time::sleep(pause).await;
            return Ok(Woken::Again);
        };
        let pause = match req.detached {
            true => pause.min(req.ttl / 3),
            false => pause,
        };
        self.await_blocker(req, w, &watch, pause).await?;
        Ok(Woken::Again)
    }

    async fn leave(&self, _req: &AcquireRequest, mut w: ZkWaiter) {
        self.drop_node(&mut w).await;
        if let Some(s) = &w.session {
            self.current.forget(s);
        }
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
        if h.meta.own.expires_at_ms.is_none() {
            // Another process's session (a nested exec re-entered it): that process keeps
            // it alive; all this one can tell is that it still holds.
            let sent = Instant::now();
            return Ok(self.lease(key, owner, h.token(), ttl, sent));
        }
        let mut meta = h.meta.clone();
        meta.token = Some(h.token());
        meta.own.expires_at_ms = Some(now_ms() + ttl.as_millis() as u64);
        let sent = Instant::now();
        let client = self.client(key).await?;
        match client
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

    /// The store's session is made on the first request: make it now.
    async fn ready(&self, key: &str) -> Result<()> {
        self.client(key).await.map(drop)
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        let (path, line) = self.line(key, true).await?;
        if mode == ReleaseMode::Force {
            return self.free(key, &path, line.holding()).await;
        }
        let h = self.holder_for("release", key, owner, &line)?;
        let node = format!("{path}/{}", h.name);
        let previous_owner = Some(h.meta.owner.clone());
        if mode == ReleaseMode::One && h.meta.depth > 1 {
            let mut meta = h.meta.clone();
            meta.depth -= 1;
            meta.token = Some(h.token());
            let client = self.client(key).await?;
            return match client
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
        self.free(key, &path, std::slice::from_ref(h)).await?;
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
            if keys.is_empty() && line.holding().is_empty() {
                continue;
            }
            all.push(line_status(&key, &line.entries, Entry::ttl_left_ms));
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
