//! One attempt on a lock's line: join it, see whether our node holds (alone, or beside
//! others as `--shared` or `--limit N` allow: see [`crate::backend::line`]), and if not,
//! what to watch.

use std::time::{Duration, Instant};

use zookeeper_client::Error as ZkError;

use super::layout;
use super::line::{self, Line};
use super::session;
use super::store::{Watch, ZkStore, ZkWaiter};
use crate::backend::line::{blocker, holding, verdict, Blocker, Contender};
use crate::backend::sharing::Admission;
use crate::backend::store::{Attempt, Busy};
use crate::backend::{AcquireRequest, Acquired};
use crate::error::{Error, Result};

impl ZkStore {
    /// Stamps our node now that it holds: the zxid of this write is the fencing token.
    pub(super) async fn stamp(
        &self,
        req: &AcquireRequest,
        w: &ZkWaiter,
        node: &str,
    ) -> Result<Acquired> {
        let client = self.client_of(w, &req.key).await?;
        let ttl = match &w.session {
            Some(s) => session::lease_ttl(s.session_timeout()),
            None => req.ttl,
        };
        let meta = layout::fresh_meta(req);
        let sent = Instant::now();
        let stat = match client.set_data(node, &meta.encode(), None).await {
            Ok(stat) => stat,
            Err(ZkError::NoNode) => return Err(self.node_gone(&req.key)),
            Err(e) => return Err(self.fail(&req.key, e)),
        };
        let lease = self.lease(&req.key, &req.owner, stat.mzxid as u64, ttl, sent);
        Ok(Acquired { lease, guard: None })
    }

    pub(super) fn node_gone(&self, key: &str) -> Error {
        Error::Unavailable(format!(
            "{}: lock '{key}': our node vanished (its session or TTL expired?)",
            self.name()
        ))
    }

    /// A waiter whose session ended (it expired while no server could be reached) queues
    /// again on a new session: its node ended with the old one, or soon will, and is
    /// deleted in case it has not yet.
    pub(super) async fn revive(&self, req: &AcquireRequest, w: &mut ZkWaiter) -> Result<()> {
        let Some(old) = w.session.as_ref().filter(|s| session::ended(s)) else {
            return Ok(());
        };
        self.current.forget(old);
        let client = session::connect(&self.target, req.ttl, &req.key).await?;
        self.current.adopt(client.clone());
        w.session = Some(client.clone());
        (w.blocker, w.lost_create) = (None, None);
        if let Some(node) = w.node.take() {
            let _ = client.delete(&node, None).await;
        }
        Ok(())
    }

    /// Deletes the waiter's node, if it has one.
    pub(super) async fn drop_node(&self, w: &mut ZkWaiter) {
        if let Some(node) = w.node.take() {
            if let Ok(client) = self.client_of(w, "").await {
                let _ = client.delete(&node, None).await;
            }
        }
        w.blocker = None;
    }

    /// A caller that does not fit how the key is held: refused at once (exit 2), without
    /// a node left behind.
    async fn refuse(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        held: crate::backend::Sharing,
    ) -> Error {
        self.drop_node(w).await;
        req.sharing.conflict(&req.key, self.name(), held)
    }

    /// One look at the line with our node in it: granted, or busy behind someone.
    pub(super) async fn look(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        enqueue: bool,
    ) -> Result<Option<Attempt>> {
        let path = self.path(&req.key)?;
        if w.node.is_none() && !enqueue {
            // Not queueing: a lock held in a way that leaves no room for us is refused
            // without a node of ours.
            let (_, line) = self.line(&req.key, true).await?;
            let ahead = line.sharings();
            match verdict(req.sharing, &ahead) {
                Admission::Admit => {}
                Admission::Conflict(held) => return Err(self.refuse(req, w, held).await),
                Admission::Wait => {
                    let queued = ahead.len() - holding(&ahead);
                    return Ok(Some(Attempt::Busy(busy_behind(req, &line, None, queued))));
                }
            }
        }
        if w.node.is_none() {
            self.enter(req, w, &path).await?;
        }
        let node = w.node.clone().unwrap_or_default();
        let name = node.rsplit('/').next().unwrap_or_default();
        let client = self.client_of(w, &req.key).await?;
        let line = line::read(&client, &path, true, Some(name))
            .await
            .map_err(|e| self.fail(&req.key, e))?;
        let Some(behind) = line.ours else {
            w.node = None; // expired meanwhile: queue again
            return Ok(None);
        };
        let ahead = line.sharings();
        match verdict(req.sharing, &ahead) {
            Admission::Admit => return self.admitted(req, w, &node, &line).await.map(Some),
            Admission::Conflict(held) => return Err(self.refuse(req, w, held).await),
            Admission::Wait => {}
        }
        w.blocker = Some(match blocker(req.sharing, &ahead) {
            Blocker::Node(i) => Watch::Node(format!("{path}/{}", line.entries[i].name)),
            Blocker::Line => Watch::Line {
                path,
                pzxid: line.pzxid,
            },
        });
        // Our place counts the waiters ahead of us, not the holders.
        let queued = ahead.len() - holding(&ahead);
        let waiters = queued + usize::from(enqueue) + behind;
        let position = enqueue.then_some(queued as u64 + 1);
        let busy = busy_behind(req, &line, position, waiters);
        if !enqueue {
            self.drop_node(w).await;
        }
        Ok(Some(Attempt::Busy(busy)))
    }

    /// Our node holds: the lease, kept under its session for renewals.
    async fn admitted(
        &self,
        req: &AcquireRequest,
        w: &mut ZkWaiter,
        node: &str,
        line: &Line,
    ) -> Result<Attempt> {
        let unchanged = line.first && line.pzxid == w.created;
        let acquired = self.granted(req, w, node, unchanged).await?;
        if let Some(s) = w.session.take() {
            self.sessions()
                .insert(req.owner.clone(), (s, node.to_string()));
        }
        Ok(Attempt::Granted(acquired))
    }

    /// Our node holds. When it came first and no contender came or went since we created
    /// it (`unchanged`: the children's pzxid is our create), no one was before us then:
    /// every earlier holder had left before our create, whose zxid is then the token.
    /// Else the node is stamped, and the zxid of that write is: holders admitted together
    /// stamp one after the other, so each has a token of its own.
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

    /// Sleeps until what blocks us may have changed, or `pause` ends.
    pub(super) async fn await_blocker(
        &self,
        req: &AcquireRequest,
        w: &ZkWaiter,
        watch: &Watch,
        pause: Duration,
    ) -> Result<()> {
        let client = self.client_of(w, &req.key).await?;
        let watcher = match watch {
            Watch::Node(node) => match client.check_and_watch_stat(node).await {
                Ok((Some(_), watcher)) => watcher,
                Ok((None, _)) => return Ok(()),
                Err(e) => return Err(self.fail(&req.key, e)),
            },
            Watch::Line { path, pzxid } => match client.get_and_watch_children(path).await {
                Ok((_, stat, watcher)) if stat.pzxid == *pzxid => watcher,
                Ok(_) | Err(ZkError::NoNode) => return Ok(()),
                Err(e) => return Err(self.fail(&req.key, e)),
            },
        };
        let _ = tokio::time::timeout(pause, watcher.changed()).await;
        Ok(())
    }
}

/// What a refused attempt reports: the first holder, our place when we queue, and how
/// many wait (`waiters`, counting us only when we stay in line).
fn busy_behind(req: &AcquireRequest, line: &Line, position: Option<u64>, waiters: usize) -> Busy {
    let holder = &line.entries[0];
    Busy {
        holder: Some(holder.info(&req.key)),
        position,
        waiters: Some(waiters as u64),
        retry: holder.ttl_left_ms().map(Duration::from_millis),
    }
}
