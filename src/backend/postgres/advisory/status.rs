//! `status` of advisory locks: every advisory lock of the database from `pg_locks`, each
//! holder named from dlock's counter row when a dlock session holds it, else marked
//! foreign (`foreign (PostgreSQL backend PID)`, with the session's user, client address
//! and application name). Waiters are the sessions `pg_locks` shows waiting.

use std::collections::BTreeMap;

use tokio_postgres::Row;

use super::backend::AdvisoryStore;
use super::lock_id::LockId;
use crate::backend::{sql, Holder, KeyStatus, LockInfo, Released, Sharing, WaiterInfo};
use crate::error::Result;

/// Every advisory lock of the current database, granted or awaited, with who asks.
const SEEN: &str = "SELECT l.classid::text, l.objid::text, l.objsubid::int4, \
     coalesce(l.pid, 0), l.granted, coalesce(a.usename::text, ''), \
     coalesce(host(a.client_addr), 'local'), coalesce(a.application_name, ''), \
     coalesce((extract(epoch FROM a.state_change) * 1000)::int8, 0) \
     FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     ORDER BY l.granted DESC, a.state_change, l.pid";

/// One session's hold on, or wait for, an advisory lock.
struct Seen {
    lock: LockId,
    pid: i32,
    granted: bool,
    holder: Holder,
}

impl Seen {
    fn of(row: &Row) -> Seen {
        let num = |i: usize| row.get::<_, String>(i).parse::<u32>().unwrap_or(0);
        let pid: i32 = row.get(3);
        Seen {
            lock: LockId::from_pg_locks(num(0), num(1), row.get::<_, i32>(2) as i16),
            pid,
            granted: row.get(4),
            holder: Holder {
                user: row.get(5),
                host: row.get(6),
                command: row.get(7),
                pid: pid.max(0) as u32,
                acquired_at_ms: row.get::<_, i64>(8).max(0) as u64,
                held_until_ms: None,
                value: None,
            },
        }
    }
}

/// dlock's counter row of a lock: who last took it, from which session.
struct Counter {
    token: i64,
    key: String,
    owner: String,
    pid: i32,
    holder: Option<String>,
}

impl AdvisoryStore {
    async fn seen(&self) -> Result<(Vec<Seen>, BTreeMap<String, Counter>)> {
        let rows = self.on_inner("cannot read pg_locks", SEEN, &[]).await?;
        let seen = rows.iter().map(Seen::of).collect();
        let sql = format!(
            "SELECT lock, token, key, owner, pid, holder FROM {}",
            self.counters
        );
        let rows = self.on_inner("cannot read the counters", &sql, &[]).await?;
        let counters = rows
            .iter()
            .map(|r| {
                let c = Counter {
                    token: r.get(1),
                    key: r.get(2),
                    owner: r.get(3),
                    pid: r.get(4),
                    holder: r.get(5),
                };
                (r.get::<_, String>(0), c)
            })
            .collect();
        Ok((seen, counters))
    }

    /// The state of `keys`, or of every advisory lock held in the database.
    pub(super) async fn read_status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        let (seen, counters) = self.seen().await?;
        if keys.is_empty() {
            let mut locks: Vec<LockId> = Vec::new();
            for s in seen.iter().filter(|s| s.granted) {
                if !locks.contains(&s.lock) {
                    locks.push(s.lock);
                }
            }
            let mut all: Vec<KeyStatus> = locks
                .into_iter()
                .map(|lock| key_status(None, lock, &seen, &counters))
                .collect();
            all.sort_by(|a, b| a.key.cmp(&b.key));
            return Ok(all);
        }
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let lock = self.lock_of(key).await?;
            out.push(key_status(Some(key), lock, &seen, &counters));
        }
        Ok(out)
    }

    /// The owner and token of the dlock session that holds `lock`, if one does.
    pub(super) async fn holding(&self, lock: LockId) -> Result<Option<(String, u64)>> {
        let (seen, counters) = self.seen().await?;
        let holder = seen.iter().find(|s| s.granted && s.lock == lock);
        Ok(holder.and_then(|s| {
            let c = counters.get(&lock.to_string()).filter(|c| c.pid == s.pid)?;
            Some((c.owner.clone(), c.token.max(0) as u64))
        }))
    }

    /// `unlock --force`: ends the session holding `lock` (whoever's), which releases it.
    pub(super) async fn terminate_holder(&self, key: &str, lock: LockId) -> Result<Released> {
        let (seen, counters) = self.seen().await?;
        let Some(s) = seen.iter().find(|s| s.granted && s.lock == lock) else {
            return Ok(Released {
                previous_owner: None,
                still_held: false,
            });
        };
        let info = lock_info(key, lock, s, &counters);
        let sql = "SELECT pg_terminate_backend($1)";
        self.on_inner("cannot end the holder's session", sql, &[&s.pid])
            .await?;
        Ok(Released {
            previous_owner: Some(info.owner),
            still_held: false,
        })
    }
}

/// The holder `s` as `status` shows it: dlock's when the counter row names its session.
fn lock_info(key: &str, lock: LockId, s: &Seen, counters: &BTreeMap<String, Counter>) -> LockInfo {
    match counters.get(&lock.to_string()).filter(|c| c.pid == s.pid) {
        Some(c) => LockInfo {
            key: c.key.clone(),
            owner: c.owner.clone(),
            fencing_token: c.token.max(0) as u64,
            holder: sql::holder_of(c.holder.as_deref()),
            ttl_left_ms: None,
            depth: 1,
        },
        None => LockInfo {
            key: key.to_string(),
            owner: format!("foreign (PostgreSQL backend {})", s.pid),
            fencing_token: 0,
            holder: s.holder.clone(),
            ttl_left_ms: None,
            depth: 1,
        },
    }
}

fn key_status(
    key: Option<&String>,
    lock: LockId,
    seen: &[Seen],
    counters: &BTreeMap<String, Counter>,
) -> KeyStatus {
    let fallback = lock.to_string();
    let named = key.cloned().unwrap_or(fallback.clone());
    let info = seen
        .iter()
        .find(|s| s.granted && s.lock == lock)
        .map(|s| lock_info(&named, lock, s, counters));
    let key = match (key, &info) {
        (Some(k), _) => k.clone(),
        (None, Some(i)) => i.key.clone(),
        (None, None) => fallback,
    };
    let waiters = seen
        .iter()
        .filter(|s| !s.granted && s.lock == lock)
        .map(|s| WaiterInfo {
            id: format!("PostgreSQL backend {}", s.pid),
            holder: s.holder.clone(),
            sharing: Sharing::Exclusive,
            priority: 0,
        })
        .collect();
    KeyStatus::exclusive(key, info).with_waiters(waiters)
}
