//! Reading state for `status`: the leases and waiters of named keys in pipelines, and
//! every held lock by one `SCAN MATCH` of the keyspace (never `KEYS`; on a Cluster, of
//! every master in turn), the leases read by `HMGET` + `PTTL` pipelines while the scan
//! goes on.

use std::collections::{HashMap, HashSet};

use futures_util::{stream, StreamExt, TryStreamExt};
use redis::Value;

use super::backend::RedisBackend;
use super::cluster::masters;
use super::conn::Conn;
use super::keys::{lease_key, lock_name, Keys, SCAN_PATTERN};
use super::reply::{group_holders, lock_info, parse_waiter, Reply, LEASE_FIELDS};
use crate::backend::{KeyStatus, LockInfo, Sharing, WaiterInfo};
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
        let (locks, groups, waiters) = tokio::try_join!(
            self.read_leases(keys),
            self.read_groups(keys),
            self.read_waiters(keys)
        )?;
        let statuses = keys.iter().zip(locks).zip(groups).zip(waiters);
        Ok(statuses
            .map(|(((key, lock), group), waiters)| {
                held_status(key, lock, group).with_waiters(waiters)
            })
            .collect())
    }

    /// The shared or semaphore holders of each key (`None` when it has none), read in
    /// pipelines with the server's time (their ends are in server ms).
    async fn read_groups(&self, keys: &[String]) -> Result<Vec<Option<Group>>> {
        self.in_chunks(keys, |conn, chunk| self.read_group_chunk(conn, chunk))
            .await
    }

    async fn read_group_chunk(
        &self,
        mut conn: Conn,
        chunk: &[String],
    ) -> Result<Vec<Option<Group>>> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for key in chunk {
            let k = Keys::new(key);
            pipe.cmd("HGETALL").arg(&k.group);
            pipe.cmd("ZRANGE")
                .arg(&k.ends)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
        }
        let reply: Value = self
            .call("cannot read lock status", pipe.query_async(&mut conn))
            .await?;
        let mut r = Reply::new(reply, &self.server.url)?;
        let (secs, micros): (u64, u64) = r.next()?;
        let now_ms = (secs * 1000 + micros / 1000) as f64;
        let mut groups = Vec::with_capacity(chunk.len());
        for key in chunk {
            let entries: HashMap<String, String> = r.next()?;
            let ends: Vec<(String, f64)> = r.next()?;
            groups.push(group_holders(key, entries, ends, now_ms));
        }
        Ok(groups)
    }

    /// `read` of each chunk of `keys` (one pipeline each, see [`Self::grouping`]), the
    /// answers in the order of `keys`.
    async fn in_chunks<'a, T, F, Fut>(&self, keys: &'a [String], read: F) -> Result<Vec<T>>
    where
        F: Fn(Conn, &'a [String]) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>>>,
    {
        let conn = self.conn().await?;
        let (chunk, parallel) = Self::grouping(&conn);
        // Futures made first: a closure in `map` would not be `Send` for every lifetime.
        let reads: Vec<Fut> = keys.chunks(chunk).map(|c| read(conn.clone(), c)).collect();
        let chunks: Vec<Vec<T>> = stream::iter(reads).buffered(parallel).try_collect().await?;
        Ok(chunks.into_iter().flatten().collect())
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
        self.in_chunks(keys, |conn, chunk| self.read_lease_chunk(conn, chunk))
            .await
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
        self.in_chunks(keys, |conn, chunk| self.read_waiter_chunk(conn, chunk))
            .await
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
            pipe.cmd("ZRANGE")
                .arg(&k.queue)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
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
            let order: Vec<(String, f64)> = r.next()?;
            let alive: HashMap<String, f64> = r.next()?;
            let mut info: HashMap<String, String> = r.next()?;
            let live = |id: &String| alive.get(id).is_some_and(|deadline| *deadline > now_ms);
            let waiters = order
                .into_iter()
                .filter(|(id, _)| live(id))
                .map(|(id, place)| {
                    let json = info.remove(&id).unwrap_or_default();
                    let (sharing, holder) = parse_waiter(&json);
                    let holder = holder.unwrap_or_default();
                    WaiterInfo {
                        id,
                        holder,
                        sharing,
                        priority: priority_of(place),
                    }
                });
            all.push(waiters.collect());
        }
        Ok(all)
    }

    /// The nodes to scan: the one server (`None`), or every master of a Cluster.
    pub(super) async fn scan_nodes(&self) -> Result<Vec<Option<(String, u16)>>> {
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

    /// One SCAN step on `node`: the next cursor, and the locks it found.
    async fn scan_step(&self, node: Option<&(String, u16)>, cursor: u64) -> Result<(u64, Found)> {
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
        let mut found = Found::default();
        for name in batch.iter().filter_map(|raw| std::str::from_utf8(raw).ok()) {
            if let Some(key) = lock_name(name, ":lease") {
                found.held.push(key.to_string());
            } else if let Some(key) = lock_name(name, ":queue") {
                found.queued.push(key.to_string());
            } else if let Some(key) = lock_name(name, ":group") {
                found.shared.push(key.to_string());
            }
        }
        Ok((next, found))
    }

    /// Every held lock, and the names of locks with a queue, by one SCAN of the keyspace
    /// (of each master, on a Cluster). Scanning and reading the leases run side by side:
    /// while the server answers one, we read the replies of the other.
    async fn scan_locks(&self) -> Result<(Vec<LockInfo>, HashSet<String>, Vec<String>)> {
        let nodes = self.scan_nodes().await?;
        let (found, mut batches) = tokio::sync::mpsc::channel::<Vec<String>>(2);
        let scanning = async move {
            let (mut queued, mut shared) = (HashSet::new(), Vec::new());
            for node in &nodes {
                let mut cursor = 0;
                loop {
                    let (next, step) = self.scan_step(node.as_ref(), cursor).await?;
                    queued.extend(step.queued);
                    shared.extend(step.shared);
                    if found.send(step.held).await.is_err() {
                        return Ok::<_, Error>((queued, shared));
                    }
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            }
            Ok((queued, shared))
        };
        let reading = async {
            let mut locks = Vec::new();
            while let Some(keys) = batches.recv().await {
                locks.extend(self.read_leases(&keys).await?.into_iter().flatten());
            }
            Ok(locks)
        };
        let ((queued, shared), locks) = tokio::try_join!(scanning, reading)?;
        Ok((locks, queued, shared))
    }

    /// `status` with no key: every held lock, sorted by key; waiters only where a queue is.
    async fn list_held(&self) -> Result<Vec<KeyStatus>> {
        let (held, queued, mut shared) = self.scan_locks().await?;
        shared.sort_unstable();
        shared.dedup(); // SCAN may return a key twice
        let groups = self.read_groups(&shared).await?;
        let mut statuses: Vec<KeyStatus> = held
            .into_iter()
            .map(|lock| held_status(&lock.key.clone(), Some(lock), None))
            .chain(
                (shared.iter().zip(groups))
                    .filter(|(_, group)| group.is_some())
                    .map(|(key, group)| held_status(key, None, group)),
            )
            .collect();
        statuses.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        statuses.dedup_by(|a, b| a.key == b.key);
        let with_queue: Vec<String> = statuses
            .iter()
            .map(|s| &s.key)
            .filter(|key| queued.contains(*key))
            .cloned()
            .collect();
        let waiters = self.read_waiters(&with_queue).await?;
        let mut waiters: HashMap<String, Vec<WaiterInfo>> =
            with_queue.into_iter().zip(waiters).collect();
        Ok(statuses
            .into_iter()
            .map(|s| {
                let queued = waiters.remove(&s.key).unwrap_or_default();
                s.with_waiters(queued)
            })
            .collect())
    }
}

/// The `--priority` of a waiter whose queue score is `place` (see `join` in common.lua).
fn priority_of(place: f64) -> i32 {
    const ARRIVALS: f64 = 4294967296.0;
    let arrival = place.rem_euclid(ARRIVALS);
    (-(place - arrival) / ARRIVALS) as i32
}

/// What one SCAN step found: locks with a lease, with a queue, with shared holders.
#[derive(Default)]
struct Found {
    held: Vec<String>,
    queued: Vec<String>,
    shared: Vec<String>,
}

/// The holders of a group and how they hold the key (see [`group_holders`]).
type Group = (Sharing, Vec<LockInfo>);

/// A key's status from its lease or its group (never both); waiters are the caller's.
fn held_status(key: &str, lock: Option<LockInfo>, group: Option<Group>) -> KeyStatus {
    match (lock, group) {
        (None, Some((sharing, holders))) => KeyStatus::group(key, sharing, holders),
        (lock, _) => KeyStatus::exclusive(key, lock),
    }
}

#[cfg(test)]
mod tests {
    use super::priority_of;

    /// The scores `join` in common.lua writes: `arrival - priority * 2^32`.
    #[test]
    fn a_waiter_s_priority_is_read_back_from_its_score() {
        for (priority, arrival) in [(0i64, 1i64), (10, 7), (-1, 3), (1_000_000, 4_294_967_295)] {
            let score = (arrival - priority * 4_294_967_296) as f64;
            assert_eq!(i64::from(priority_of(score)), priority, "{score}");
        }
        assert_eq!(
            priority_of((1 + 1_000_000 * 4_294_967_296i64) as f64),
            -1_000_000
        );
    }
}
