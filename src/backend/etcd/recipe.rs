//! The shape of etcd's `concurrency.Mutex` locks, as pure functions: key names, the
//! transactions, and what a lock key's value says. No I/O here.
//!
//! A lock NAME is the set of keys `<prefix>NAME/<lease id in hex>`, one per contender,
//! each attached to its contender's lease. The holder is the key with the lowest create
//! revision; the others wait in create-revision order.

use serde::{Deserialize, Serialize};

use super::client::prefix_end;
use super::proto::*;
use crate::backend::{Holder, LockInfo, Sharing, WaiterInfo};

/// What dlock stores in its lock keys (`etcdctl lock` stores nothing).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    pub owner: String,
    pub depth: u32,
    /// The fencing token once the key was rewritten after it was acquired (re-entered);
    /// until then it is the key's mod revision: its creation when it took a free lock, the
    /// write that marked its turn when it waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// How this contender holds beside others; absent (an older dlock's key, or none at
    /// all: `etcdctl lock`'s) it is an exclusive writer.
    #[serde(default, skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    #[serde(flatten)]
    pub holder: Holder,
}

impl Meta {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// One contender's key, read back.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kv: KeyValue,
    pub meta: Meta,
}

impl Entry {
    /// Reads a lock key; a key that is not dlock's JSON (an `etcdctl lock` key) is named
    /// by its lease, as `etcdctl lease` does.
    pub fn read(kv: KeyValue) -> Entry {
        let meta = serde_json::from_slice::<Meta>(&kv.value).unwrap_or_else(|_| Meta {
            owner: format!("{:x}", kv.lease),
            depth: 1,
            token: None,
            sharing: Sharing::Exclusive,
            holder: Holder {
                command: "(etcdctl lock)".into(),
                ..Holder::default()
            },
        });
        Entry { kv, meta }
    }

    pub fn token(&self) -> u64 {
        self.meta
            .token
            .unwrap_or(self.kv.mod_revision.max(0) as u64)
    }

    /// True when `owner` names this entry: its owner id, or its lease in hex.
    pub fn owned_by(&self, owner: &str) -> bool {
        self.meta.owner == owner || format!("{:x}", self.kv.lease) == owner
    }

    pub fn info(&self, name: &str, ttl_left_ms: Option<u64>) -> LockInfo {
        LockInfo {
            key: name.to_string(),
            owner: self.meta.owner.clone(),
            fencing_token: self.token(),
            holder: self.meta.holder.clone(),
            ttl_left_ms,
            depth: self.meta.depth.max(1),
        }
    }

    pub fn waiter(&self) -> WaiterInfo {
        WaiterInfo {
            id: self.meta.owner.clone(),
            holder: self.meta.holder.clone(),
            sharing: self.meta.sharing,
        }
    }
}

/// A lease id of our own choosing (positive, never 0, which asks etcd to choose), so that a
/// key can be put on the lease in the same breath as the lease is granted.
pub fn new_lease_id() -> i64 {
    (crate::holder::random_u64() >> 1).max(1) as i64
}

/// `<prefix>NAME/`: every contender's key for lock NAME starts with it.
pub fn lock_dir(prefix: &str, name: &str) -> Vec<u8> {
    format!("{prefix}{name}/").into_bytes()
}

/// A contender's key: `<prefix>NAME/<lease hex>`, as `etcdctl lock` names it.
pub fn contender_key(dir: &[u8], lease: i64) -> Vec<u8> {
    let mut key = dir.to_vec();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    key
}

/// The lock name of `key` under `prefix` when it has a contender key's shape
/// (`<prefix>NAME/<hex of its own lease>`), else `None`: other keys are not locks. A
/// holder left held by `exec --hold-at-least` is on another lease than its name says
/// (see [`super::linger`]): any lease id in hex, on a key with a lease, is accepted.
pub fn lock_name(prefix: &str, kv: &KeyValue) -> Option<String> {
    let key = std::str::from_utf8(&kv.key).ok()?.strip_prefix(prefix)?;
    let (name, lease) = key.rsplit_once('/')?;
    let hex = !lease.is_empty()
        && lease
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (kv.lease != 0 && !name.is_empty() && hex).then(|| name.to_string())
}

fn op(request: Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// Every key under `dir`, oldest first (`limit` 0: all).
pub fn contenders(dir: &[u8], limit: i64) -> RangeRequest {
    RangeRequest {
        key: dir.to_vec(),
        range_end: prefix_end(dir),
        limit,
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        ..Default::default()
    }
}

/// The newest contender created before `rev`: the one a waiter at `rev` watches.
pub fn predecessor(dir: &[u8], rev: i64) -> RangeRequest {
    RangeRequest {
        sort_order: SortOrder::Descend as i32,
        max_create_revision: rev - 1,
        limit: 1,
        ..contenders(dir, 1)
    }
}

/// How many contenders were created before revision `rev` (all of them when `None`),
/// counted without reading them.
pub fn count_before(dir: &[u8], rev: Option<i64>) -> RangeRequest {
    RangeRequest {
        count_only: true,
        max_create_revision: rev.map_or(0, |r| r - 1),
        ..contenders(dir, 0)
    }
}

/// The check that `key` does not exist yet, and the write that creates it on `lease`: the
/// start of every contender's transaction.
pub fn create_if_absent(key: &[u8], value: Vec<u8>, lease: i64) -> (Compare, PutRequest) {
    let absent = created_at(key, 0);
    let put = PutRequest {
        key: key.to_vec(),
        value,
        lease,
        ..Default::default()
    };
    (absent, put)
}

/// Creates our key if absent, and reads the holder, in one round trip (the `Mutex`'s
/// `tryAcquire`): responses are [put or our key, the oldest contender, how many contend,
/// how many are ahead of us], and last the lease of the lock's run records (`runs`, see
/// [`run_lease`]), so that the release can write them with no read first. `queued_at`,
/// our key's create revision when we know it, lets a waiter that finds its key count the
/// contenders ahead of it (a new key is the last).
pub fn enter(
    dir: &[u8],
    key: &[u8],
    value: Vec<u8>,
    lease: i64,
    queued_at: Option<i64>,
    runs: &[u8],
) -> TxnRequest {
    let (absent, put) = create_if_absent(key, value, lease);
    let ours = RangeRequest {
        key: key.to_vec(),
        ..Default::default()
    };
    let mut failure = vec![
        op(Request::Range(ours)),
        op(Request::Range(contenders(dir, 1))),
        op(Request::Range(count_before(dir, None))),
    ];
    if let Some(rev) = queued_at {
        failure.push(op(Request::Range(count_before(dir, Some(rev)))));
    }
    failure.push(run_lease_range(runs));
    TxnRequest {
        compare: vec![absent],
        success: vec![
            op(Request::Put(put)),
            op(Request::Range(contenders(dir, 1))),
            op(Request::Range(count_before(dir, None))),
            run_lease_range(runs),
        ],
        failure,
    }
}

/// Reads the key `runs` (its lease), without its value.
fn run_lease_range(runs: &[u8]) -> RequestOp {
    op(Request::Range(RangeRequest {
        key: runs.to_vec(),
        keys_only: true,
        ..Default::default()
    }))
}

/// The lease of the run records, from an [`enter`] or [`take_turn`] answer (0: none yet).
pub fn run_lease(resp: &TxnResponse) -> i64 {
    let last = resp.responses.len().saturating_sub(1);
    range_kvs(resp, last).first().map_or(0, |kv| kv.lease)
}

/// Where a queued waiter stands, read with no write: the answers of an [`enter`] that
/// found its key (created at `rev`).
pub fn standing(dir: &[u8], key: &[u8], rev: i64, runs: &[u8]) -> TxnRequest {
    TxnRequest {
        compare: Vec::new(),
        success: enter(dir, key, Vec::new(), 0, Some(rev), runs).failure,
        failure: Vec::new(),
    }
}

/// A waiter's turn, taken in one write once its predecessors may be gone: if our key (created
/// at `rev`) is still there and no contender is older, its value becomes `value`, and the
/// revision of that write is the fencing token (later than any earlier holder's release,
/// which an `etcdctl lock` holder's token precedes). Otherwise nothing is written, and the
/// responses are those of an [`enter`] that found our key.
pub fn take_turn(dir: &[u8], key: &[u8], rev: i64, value: Vec<u8>, runs: &[u8]) -> TxnRequest {
    let ours = created_at(key, rev);
    // Every key under `dir` was created at `rev` or later: none is ahead of ours.
    let first = Compare {
        result: CompareResult::Greater as i32,
        target: CompareTarget::Create as i32,
        key: dir.to_vec(),
        target_union: Some(TargetUnion::CreateRevision(rev - 1)),
        range_end: prefix_end(dir),
    };
    let put = PutRequest {
        key: key.to_vec(),
        value,
        ignore_lease: true,
        ..Default::default()
    };
    let found = enter(dir, key, Vec::new(), 0, Some(rev), runs);
    TxnRequest {
        compare: vec![ours, first],
        success: vec![op(Request::Put(put)), run_lease_range(runs)],
        failure: found.failure,
    }
}

/// Frees the lock in one write while `key` is still ours, with `records` (puts) written in
/// the same breath: the records of a run come before the next holder can start.
///
/// `next`, the successor's key as read and its new value, hands the lock over: the same
/// write rewrites that key if it is unchanged, so that its mod revision, the revision of the
/// release, becomes its token and its owner starts with no write of its own. Refused (our
/// key gone, or the successor's changed), nothing is written and the answer is our key.
pub fn release(
    key: &[u8],
    mut records: Vec<RequestOp>,
    next: Option<(&KeyValue, Vec<u8>)>,
) -> TxnRequest {
    let mut compare = vec![Compare {
        result: CompareResult::Greater as i32,
        target: CompareTarget::Version as i32,
        key: key.to_vec(),
        target_union: Some(TargetUnion::Version(0)),
        range_end: Vec::new(),
    }];
    if let Some((kv, value)) = next {
        compare.push(Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Mod as i32,
            key: kv.key.clone(),
            target_union: Some(TargetUnion::ModRevision(kv.mod_revision)),
            range_end: Vec::new(),
        });
        records.push(op(Request::Put(PutRequest {
            key: kv.key.clone(),
            value,
            ignore_lease: true,
            ..Default::default()
        })));
    }
    records.push(op(Request::DeleteRange(DeleteRangeRequest {
        key: key.to_vec(),
        ..Default::default()
    })));
    TxnRequest {
        compare,
        success: records,
        failure: vec![op(Request::Range(RangeRequest {
            key: key.to_vec(),
            keys_only: true,
            ..Default::default()
        }))],
    }
}

/// The check that `key` was created at `revision` (0: that it does not exist).
pub fn created_at(key: &[u8], revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.to_vec(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
        range_end: Vec::new(),
    }
}

/// Rewrites `key`'s value if it is still at `mod_revision`, keeping its lease.
pub fn rewrite(key: &[u8], mod_revision: i64, value: Vec<u8>) -> TxnRequest {
    let unchanged = Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Mod as i32,
        key: key.to_vec(),
        target_union: Some(TargetUnion::ModRevision(mod_revision)),
        range_end: Vec::new(),
    };
    put_if(unchanged, value)
}

/// Writes `value` to the key `check` compares, keeping its lease, if `check` holds.
pub fn put_if(check: Compare, value: Vec<u8>) -> TxnRequest {
    let put = PutRequest {
        key: check.key.clone(),
        value,
        ignore_lease: true,
        ..Default::default()
    };
    TxnRequest {
        compare: vec![check],
        success: vec![op(Request::Put(put))],
        failure: Vec::new(),
    }
}

/// The count of a transaction's `i`th answer, when it is a range.
pub fn range_count(resp: &TxnResponse, i: usize) -> Option<u64> {
    match resp.responses.get(i).and_then(|r| r.response.as_ref()) {
        Some(Response::Range(r)) => Some(r.count.max(0) as u64),
        _ => None,
    }
}

/// Our 1-based place among the waiters and how many wait, from an `enter` answer (the
/// holder is the one contender that does not wait).
pub fn queue_place(resp: &TxnResponse) -> (Option<u64>, Option<u64>) {
    let total = range_count(resp, 2);
    let ahead = match (resp.succeeded, range_count(resp, 3)) {
        (false, Some(ahead)) => Some(ahead),
        _ => total.map(|n| n.saturating_sub(1)),
    };
    (ahead, total.map(|n| n.saturating_sub(1)))
}

/// The key-values of a transaction's `i`th answer, when it is a range.
pub fn range_kvs(resp: &TxnResponse, i: usize) -> &[KeyValue] {
    match resp.responses.get(i).and_then(|r| r.response.as_ref()) {
        Some(Response::Range(r)) => &r.kvs,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, lease: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            lease,
            ..Default::default()
        }
    }

    #[test]
    fn lock_keys_are_told_by_their_shape() {
        assert_eq!(contender_key(b"job/", 0x694d7d5e), b"job/694d7d5e");
        assert_eq!(
            lock_name("", &kv("job/694d7d5e", 0x694d7d5e)).as_deref(),
            Some("job")
        );
        assert_eq!(lock_name("", &kv("a/b/1f", 0x1f)).as_deref(), Some("a/b"));
        assert_eq!(lock_name("p/", &kv("p/x/1f", 0x1f)).as_deref(), Some("x"));
        // A holder moved to a lease of its own by --hold-at-least keeps its name.
        assert_eq!(lock_name("", &kv("job/1f", 0x2f)).as_deref(), Some("job"));
        // Not locks: no lease, a suffix that is no lease id, another prefix.
        assert_eq!(lock_name("", &kv("job/1f", 0)), None);
        assert_eq!(lock_name("", &kv("job/report", 0x2f)), None);
        assert_eq!(lock_name("", &kv("/1f", 0x1f)), None);
        assert_eq!(lock_name("p/", &kv("q/x/1f", 0x1f)), None);
    }

    #[test]
    fn etcdctl_keys_are_named_by_their_lease() {
        let mut k = kv("job/1f", 0x1f);
        k.create_revision = 7;
        k.mod_revision = 7;
        let e = Entry::read(k);
        assert_eq!(e.meta.owner, "1f");
        assert!(e.owned_by("1f"));
        assert_eq!(e.token(), 7);
        assert_eq!(e.info("job", None).depth, 1);
    }
}
