//! The shape of etcd's `concurrency.Mutex` locks, as pure functions: key names, the
//! transactions, and what a lock key's value says. No I/O here.
//!
//! A lock NAME is the set of keys `<prefix>NAME/<lease id in hex>`, one per contender,
//! each attached to its contender's lease. The holder is the key with the lowest create
//! revision; the others wait in create-revision order.

use super::client::prefix_end;
use super::proto::*;
use crate::backend::line::{Contender, Meta};
use crate::backend::{Holder, Sharing};

/// One contender's key, read back.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kv: KeyValue,
    pub meta: Meta,
}

impl Entry {
    /// Reads a lock key; a key that is not dlock's JSON (an `etcdctl lock` key) is named
    /// by its lease, as `etcdctl lease` does, and its value (an `etcdctl elect` proposal;
    /// empty for `etcdctl lock`) is what it proclaims.
    pub fn read(kv: KeyValue) -> Entry {
        let meta = serde_json::from_slice::<Meta>(&kv.value).unwrap_or_else(|_| Meta {
            owner: format!("{:x}", kv.lease),
            depth: 1,
            holder: Holder {
                command: "(etcdctl lock)".into(),
                value: (!kv.value.is_empty())
                    .then(|| String::from_utf8_lossy(&kv.value).into_owned()),
                ..Holder::default()
            },
            ..Meta::default()
        });
        Entry { kv, meta }
    }
}

impl Contender for Entry {
    type Own = ();

    fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The key's mod revision: its creation when it took a free lock, the write that
    /// marked its turn when it waited.
    fn written(&self) -> u64 {
        self.kv.mod_revision.max(0) as u64
    }

    /// Its lease in hex, as `etcdctl lease` names it.
    fn named(&self, owner: &str) -> bool {
        format!("{:x}", self.kv.lease) == owner
    }

    /// As its value says: etcd keeps it nowhere else.
    fn sharing(&self) -> Sharing {
        self.meta.sharing
    }

    /// A lease's time left is the server's to say: `status` asks it (one round trip per
    /// holder), the rest do without.
    fn ttl_left_ms(&self) -> Option<u64> {
        None
    }
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
    (kv.lease != 0 && !name.is_empty() && lease_hex(lease.as_bytes())).then(|| name.to_string())
}

/// True when `kv` is a contender for the lock whose keys start with `dir` (`NAME/`): the
/// key is `dir` and a lease id in hex, on a lease, as [`lock_name`] reads it. A key of a
/// lock named below it (`NAME/sub/<hex>`) is under `dir` too, but contends for `NAME/sub`
/// only: every read of a lock's line keeps to these keys.
pub fn contends(dir: &[u8], kv: &KeyValue) -> bool {
    kv.lease != 0 && kv.key.strip_prefix(dir).is_some_and(lease_hex)
}

/// A lease id as a contender key ends with it: lowercase hex, as `etcdctl lock` writes it.
fn lease_hex(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

fn op(request: Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// Every key under `dir`, oldest first (`limit` 0: all): the lock's contenders, and the
/// keys of the locks named below it, which [`contends`] tells apart.
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

/// The keys under `dir` created before `rev`, newest first, without values: the first
/// that [`contends`] is the contender a waiter at `rev` watches.
pub fn ahead_of(dir: &[u8], rev: i64) -> RangeRequest {
    RangeRequest {
        sort_order: SortOrder::Descend as i32,
        max_create_revision: rev - 1,
        keys_only: true,
        ..contenders(dir, 0)
    }
}

/// The contenders of the lock under `dir` in a transaction's `i`th answer (a read of
/// [`contenders`]), oldest first.
pub fn line<'a>(resp: &'a TxnResponse, i: usize, dir: &[u8]) -> Vec<&'a KeyValue> {
    let kvs = range_kvs(resp, i);
    kvs.iter().filter(|kv| contends(dir, kv)).collect()
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

/// Creates our key if absent, and reads the line, in one round trip (the `Mutex`'s
/// `tryAcquire`): responses are [put or our key, every contender, oldest first (see
/// [`line`])], and last the lease of the lock's run records (`runs`, see [`run_lease`]),
/// so that the release can write them with no read first.
///
/// The line is read whole, not as etcd's `Mutex` reads its first key and counts the rest:
/// under `NAME/` are also the keys of the locks named below it, which no range can leave
/// out.
pub fn enter(dir: &[u8], key: &[u8], value: Vec<u8>, lease: i64, runs: &[u8]) -> TxnRequest {
    let (absent, put) = create_if_absent(key, value, lease);
    let ours = RangeRequest {
        key: key.to_vec(),
        ..Default::default()
    };
    let all = || op(Request::Range(contenders(dir, 0)));
    TxnRequest {
        compare: vec![absent],
        success: vec![op(Request::Put(put)), all(), run_lease_range(runs)],
        failure: vec![op(Request::Range(ours)), all(), run_lease_range(runs)],
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

/// The lease of the run records, from an [`enter`] or [`take_turn`] answer (0: none yet):
/// its last range (an election's sibling write may follow it).
pub fn run_lease(resp: &TxnResponse) -> i64 {
    let last = resp
        .responses
        .iter()
        .rposition(|r| matches!(r.response, Some(Response::Range(_))));
    last.and_then(|i| range_kvs(resp, i).first())
        .map_or(0, |kv| kv.lease)
}

/// A shared or semaphore contender's attempt, in one round trip: creates our key on `lease`
/// if absent, then reads every contender (oldest first) and the lease of the run records.
/// Answers: [put, contenders, runs] when created, else [contenders, runs].
pub fn enter_shared(dir: &[u8], key: &[u8], value: Vec<u8>, lease: i64, runs: &[u8]) -> TxnRequest {
    let (absent, put) = create_if_absent(key, value, lease);
    let all = || op(Request::Range(contenders(dir, 0)));
    TxnRequest {
        compare: vec![absent],
        success: vec![op(Request::Put(put)), all(), run_lease_range(runs)],
        failure: vec![all(), run_lease_range(runs)],
    }
}

/// Marks the admission of a shared or semaphore contender that waited: rewrites its key
/// (created at `created`) with `value` if it is still there, so that the key's mod
/// revision, the revision of this very write, is its own fencing token, later than any
/// token handed out before, even to a contender admitted by the same release.
pub fn stamp(key: &[u8], created: i64, value: Vec<u8>) -> TxnRequest {
    put_if(created_at(key, created), value)
}

/// Where a queued waiter stands, read with no write: the answers of an [`enter`] that
/// found its key (created at `rev`).
pub fn standing(dir: &[u8], key: &[u8], runs: &[u8]) -> TxnRequest {
    TxnRequest {
        compare: Vec::new(),
        success: enter(dir, key, Vec::new(), 0, runs).failure,
        failure: Vec::new(),
    }
}

/// A waiter's turn, taken in one write once a read ([`standing`]) found no contender ahead
/// of our key (created at `rev`): if our key is still there, its value becomes `value`, and
/// the revision of that write is the fencing token (later than any earlier holder's
/// release, which an `etcdctl lock` holder's token precedes). No contender can get ahead
/// of it since that read: a key is created at the revision of its creation, later than
/// `rev`. Otherwise nothing is written, and the responses are those of an [`enter`] that
/// found no key of ours.
pub fn take_turn(dir: &[u8], key: &[u8], rev: i64, value: Vec<u8>, runs: &[u8]) -> TxnRequest {
    let put = PutRequest {
        key: key.to_vec(),
        value,
        ignore_lease: true,
        ..Default::default()
    };
    let found = enter(dir, key, Vec::new(), 0, runs);
    TxnRequest {
        compare: vec![created_at(key, rev)],
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

/// Writes `value` to the key `check` compares, keeping its lease, if `check` holds; else
/// reads the key (see [`written_at`]).
pub fn put_if(check: Compare, value: Vec<u8>) -> TxnRequest {
    let put = PutRequest {
        key: check.key.clone(),
        value,
        ignore_lease: true,
        ..Default::default()
    };
    let read = RangeRequest {
        key: check.key.clone(),
        ..Default::default()
    };
    TxnRequest {
        compare: vec![check],
        success: vec![op(Request::Put(put))],
        failure: vec![op(Request::Range(read))],
    }
}

/// The revision of the write of `value` by a [`put_if`] (or [`rewrite`]), when its key
/// holds `value` (on `lease`, unless 0): the write succeeded, or an earlier try of it did
/// (it was sent again after its answer was lost, and then found the key changed by it).
pub fn written_at(resp: &TxnResponse, value: &[u8], lease: i64) -> Option<i64> {
    if resp.succeeded {
        return Some(resp.header.as_ref().map_or(0, |h| h.revision));
    }
    let kv = range_kvs(resp, 0).first()?;
    (kv.value == value && (lease == 0 || kv.lease == lease)).then_some(kv.mod_revision)
}

/// Our 1-based place among the waiters and how many wait, in a `line` of contenders in
/// which our key was created at `ours` (the holder is the one contender that does not
/// wait, and counts among those ahead).
pub fn queue_place(line: &[&KeyValue], ours: i64) -> (Option<u64>, Option<u64>) {
    let ahead = line.iter().filter(|kv| kv.create_revision < ours).count();
    let waiting = line.len().saturating_sub(1);
    (Some(ahead as u64), Some(waiting as u64))
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
    fn only_lease_keys_right_under_a_lock_contend_for_it() {
        assert!(contends(b"p/", &kv("p/1f", 0x1f)));
        // Moved to a lease of its own by --hold-at-least: still a contender.
        assert!(contends(b"p/", &kv("p/1f", 0x2f)));
        // The keys of `p/a`, `etcdctl lock p/a`'s included, are not `p`'s.
        assert!(!contends(b"p/", &kv("p/a/1f", 0x1f)));
        assert!(!contends(b"p/", &kv("p/1f/2f", 0x2f)));
        // Not lock keys at all: no lease, no lease id, another lock.
        assert!(!contends(b"p/", &kv("p/1f", 0)));
        assert!(!contends(b"p/", &kv("p/report", 0x1f)));
        assert!(!contends(b"p/", &kv("q/1f", 0x1f)));
        assert!(!contends(b"p/", &kv("p/", 0x1f)));
    }

    #[test]
    fn the_place_in_line_counts_the_contenders_only() {
        let at = |rev| KeyValue {
            create_revision: rev,
            ..kv("p/1f", 1)
        };
        let (holder, w1, w2) = (at(3), at(5), at(9));
        let line = [&holder, &w1, &w2];
        assert_eq!(queue_place(&line, 5), (Some(1), Some(2)));
        assert_eq!(queue_place(&line, 9), (Some(2), Some(2)));
    }

    #[test]
    fn a_rewrite_found_done_by_an_earlier_try_counts_as_written() {
        let found = |value: &str, lease| TxnResponse {
            succeeded: false,
            responses: vec![ResponseOp {
                response: Some(Response::Range(RangeResponse {
                    kvs: vec![KeyValue {
                        value: value.into(),
                        mod_revision: 12,
                        ..kv("p/1f", lease)
                    }],
                    ..Default::default()
                })),
            }],
            ..Default::default()
        };
        assert_eq!(written_at(&found("ours", 7), b"ours", 7), Some(12));
        assert_eq!(written_at(&found("ours", 7), b"ours", 0), Some(12));
        assert_eq!(written_at(&found("theirs", 7), b"ours", 7), None);
        assert_eq!(written_at(&found("ours", 8), b"ours", 7), None);
        assert_eq!(written_at(&TxnResponse::default(), b"ours", 0), None);
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
        assert_eq!(e.info("job").depth, 1);
    }
}
