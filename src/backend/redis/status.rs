//! Reading state for `status`: the leases and waiters of named keys in pipelines, and
//! every held lock by one `SCAN MATCH` of the keyspace (never `KEYS`; on a Cluster, of
//! every master in turn), the leases read by `HMGET` + `PTTL` pipelines while the scan
//! goes on.

use std::collections::{HashMap, HashSet};

use futures_util::{stream, StreamExt, TryStreamExt};
use redis::Value;

use super::cluster::masters;
use super::conn::Conn;
use super::keys::{lease_key, lock_name, Keys, SCAN_PATTERN};
use super::reply::{lock_info, parse_holder, Reply, LEASE_FIELDS};
use super::RedisBackend;
use crate::backend::{KeyStatus, LockInfo, WaiterInfo};
use crate::error::{Error, Result};

/// Keys asked per SCAN call: large, so 100,000 locks take few round trips.
const SCAN_COUNT: u64 = 10_000;
/// Locks read per status pipeline.
const STATUS_CHUNK: usize = 2000;
/// On a Cluster, locks read at once (one pipeline each).
const CLUSTER_PARALLEL: usize = 64;

impl RedisBackend {
    /// The state of the named keys, in order; with no key, every held lock.
    pub(super) async fn read_status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        if keys.is_empty() {
            return self.list_held().await;
        }
        let locks = self.read_leases(keys).await?;
        let waiters = self.read_waiters(keys).await?;
        let statuses = keys.iter().zip(locks).zip(waiters);
        Ok(statuses
            .map(|((key, lock), waiters)| KeyStatus {
                key: key.clone(),
                lock,
                waiters: Some(waiters),
                servers: None,
                holders: Vec::new(),
                sharing: crate::backend::Sharing::Exclusive,
            })
            .collect())
    }

    /// How keys are grouped in pipelines: many per pipeline on one server; on a Cluster one
    /// lock per pipeline (its keys share a slot, another lock's may not), several at once.
    fn grouping(conn: &Conn) -> (usize, usize) {
        if conn.is_cluster() {
            (1, CLUSTER_PARALLEL)
        } else {
            (STATUS_CHUNK, 1)
        }
    }

    /// The lease of each key (`None` when free), read in pipelines.
    async fn read_leases(&self, keys: &[String]) -> Result<Vec<Option<LockInfo>>> {
        let conn = self.conn().await?;
        let (chunk, parallel) = Self::grouping(&conn);
        // Futures made first: a closure in `map` would not be `Send` for every lifetime.
        let reads: Vec<_> = keys
            .chunks(chunk)
            .map(|chunk| self.read_lease_chunk(conn.clone(), chunk))
            .collect();
        let reads = stream::iter(reads).buffered(parallel);
        let chunks: Vec<Vec<Option<LockInfo>>> = reads.try_collect().await?;
        Ok(chunks.into_iter().flatten().collect())
    }

    async fn read_lease_chunk(
        &self,
        mut conn: Conn,
        chunk: &[String],
    ) -> Result<Vec<Option<LockInfo>>> {
        let mut pipe = redis::pipe();
        for key in chunk {
            let lease = lease_key(key);
            pipe.cmd("HMGET").arg(&lease).arg(&LEASE_FIELDS[..]);
            pipe.cmd("PTTL").arg(&lease);
        }
        let reply: Value = self
            .call("cannot read lock status", pipe.query_async(&mut conn))
            .await?;
        let mut r = Reply::new(reply, &self.server.url)?;
        let mut locks = Vec::with_capacity(chunk.len());
        for key in chunk {
            let fields: Vec<Option<String>> = r.next()?;
            locks.push(lock_info(key, fields, r.next()?));
        }
        Ok(locks)
    }

    /// The live waiters of each key, in queue order.
    async fn read_waiters(&self, keys: &[String]) -> Result<Vec<Vec<WaiterInfo>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.conn().await?;
        let (chunk, parallel) = Self::grouping(&conn);
        // Futures made first: a closure in `map` would not be `Send` for every lifetime.
        let reads: Vec<_> = keys
            .chunks(chunk)
            .map(|chunk| self.read_waiter_chunk(conn.clone(), chunk))
            .collect();
        let reads = stream::iter(reads).buffered(parallel);
        let chunks: Vec<Vec<Vec<WaiterInfo>>> = reads.try_collect().await?;
        Ok(chunks.into_iter().flatten().collect())
    }

    /// The live waiters of each key of `keys`, in one pipeline.
    async fn read_waiter_chunk(
        &self,
        mut conn: Conn,
        keys: &[String],
    ) -> Result<Vec<Vec<WaiterInfo>>> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for key in keys {
            let k = Keys::new(key);
            pipe.cmd("ZRANGE").arg(&k.queue).arg(0).arg(-1);
            pipe.cmd("ZRANGE")
                .arg(&k.alive)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
            pipe.cmd("HGETALL").arg(&k.info);
        }
        let reply: Value = self
            .call("cannot read lock status", pipe.query_async(&mut conn))
            .await?;
        let mut r = Reply::new(reply, &self.server.url)?;
        let (secs, micros): (u64, u64) = r.next()?;
        let now_ms = (secs * 1000 + micros / 1000) as f64;
        let mut all = Vec::with_capacity(keys.len());
        for _ in keys {
            let order: Vec<String> = r.next()?;
            let alive: HashMap<String, f64> = r.next()?;
            let mut info: HashMap<String, String> = r.next()?;
            let live = |id: &String| alive.get(id).is_some_and(|deadline| *deadline > now_ms);
            let waiters = order.into_iter().filter(live).map(|id| {
                let holder = info
                    .remove(&id)
                    .and_then(|json| parse_holder(&json))
                    .unwrap_or_default();
                WaiterInfo { id, holder }
            });
            all.push(waiters.collect());
        }
        Ok(all)
    }

    /// The nodes to scan: the one server (`None`), or every master of a Cluster.
    async fn scan_nodes(&self) -> Result<Vec<Option<(String, u16)>>> {
        let mut conn = self.conn().await?;
        if !conn.is_cluster() {
            return Ok(vec![None]);
        }
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let reply: Value = self
            .call("cannot list locks", slots.query_async(&mut conn))
            .await?;
        Ok(masters(reply).into_iter().map(Some).collect())
    }

    /// One SCAN step on `node`: the next cursor, the locks with a lease, the locks with a
    /// queue.
    async fn scan_step(
        &self,
        node: Option<&(String, u16)>,
        cursor: u64,
    ) -> Result<(u64, Vec<String>, Vec<String>)> {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(SCAN_PATTERN);
        scan.arg("COUNT").arg(SCAN_COUNT);
        let mut conn = self.conn().await?;
        let reply = self
            .call("cannot list locks", conn.on_node(node, &scan))
            .await?;
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::from_redis_value(reply).map_err(|e| {
            Error::Internal(format!("unexpected reply from {}: {e}", self.server.url))
        })?;
        let (mut held, mut queued) = (Vec::new(), Vec::new());
        for name in batch.iter().filter_map(|raw| std::str::from_utf8(raw).ok()) {
            if let Some(key) = lock_name(name, ":lease") {
                held.push(key.to_string());
            } else if let Some(key) = lock_name(name, ":queue") {
                queued.push(key.to_string());
            }
        }
        Ok((next, held, queued))
    }

    /// Every held lock, and the names of locks with a queue, by one SCAN of the keyspace
    /// (of each master, on a Cluster). Scanning and reading the leases run side by side:
    /// while the server answers one, we read the replies of the other.
    async fn scan_locks(&self) -> Result<(Vec<LockInfo>, HashSet<String>)> {
        let nodes = self.scan_nodes().await?;
        let (found, mut batches) = tokio::sync::mpsc::channel::<Vec<String>>(2);
        let scanning = async move {
            let mut queued = HashSet::new();
            for node in &nodes {
                let mut cursor = 0;
                loop {
                    let (next, held, with_queue) = self.scan_step(node.as_ref(), cursor).await?;
                    queued.extend(with_queue);
                    if found.send(held).await.is_err() {
                        return Ok::<_, Error>(queued);
                    }
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            }
            Ok(queued)
        };
        let reading = async {
            let mut locks = Vec::new();
            while let Some(keys) = batches.recv().await {
                locks.extend(self.read_leases(&keys).await?.into_iter().flatten());
            }
            Ok(locks)
        };
        let (queued, locks) = tokio::try_join!(scanning, reading)?;
        Ok((locks, queued))
    }

    /// `status` with no key: every held lock, sorted by key; waiters only where a queue is.
    async fn list_held(&self) -> Result<Vec<KeyStatus>> {
        let (mut held, queued) = self.scan_locks().await?;
        held.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        held.dedup_by(|a, b| a.key == b.key); // SCAN may return a key twice
        let with_queue: Vec<String> = held
            .iter()
            .map(|lock| &lock.key)
            .filter(|key| queued.contains(*key))
            .cloned()
            .collect();
        let waiters = self.read_waiters(&with_queue).await?;
        let mut waiters: HashMap<String, Vec<WaiterInfo>> =
            with_queue.into_iter().zip(waiters).collect();
        let statuses = held.into_iter().map(|lock| KeyStatus {
            key: lock.key.clone(),
            waiters: Some(waiters.remove(&lock.key).unwrap_or_default()),
            lock: Some(lock),
            servers: None,
            holders: Vec::new(),
            sharing: crate::backend::Sharing::Exclusive,
        });
        Ok(statuses.collect())
    }
}
