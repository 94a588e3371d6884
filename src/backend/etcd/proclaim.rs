//! An election's keys: the contender key `<prefix>NAME/<lease hex>` holds the bare
//! proclamation (`elect --value`), as etcd's `concurrency.Election` writes it, so that
//! `etcdctl elect -l NAME` prints it as it is. dlock's record of the candidate (owner,
//! host, pid, token: [`Meta`]) goes to a sibling key on the same lease,
//! `<prefix>\0elect\0NAME\0<lease hex>`, written in the same transaction and gone with the
//! lease or the release. The NUL bytes keep it out of every lock's way, as the run records'
//! (see [`super::runs`]): no range over `NAME/` and no listing of lock names sees it.
//!
//! A lock's contender (`exec`, `lock`) proclaims nothing: its key holds the [`Meta`] JSON
//! itself, and nothing else is written.

use super::proto::*;
use super::recipe::Entry;
use crate::backend::line::Meta;

/// What every sibling key of election `name` starts with.
pub fn meta_dir(prefix: &str, name: &str) -> Vec<u8> {
    format!("{prefix}\0elect\0{name}\0").into_bytes()
}

/// The sibling key of the candidate on `lease`.
pub fn meta_key(prefix: &str, name: &str, lease: i64) -> Vec<u8> {
    let mut key = meta_dir(prefix, name);
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    key
}

/// What the contender key on `lease` holds for `meta`, and the write of its sibling when it
/// is an election's (an exclusive contender that proclaims a value).
pub fn values(prefix: &str, name: &str, lease: i64, meta: &Meta) -> (Vec<u8>, Option<RequestOp>) {
    match &meta.holder.value {
        Some(v) if meta.sharing.is_exclusive() => {
            let put = PutRequest {
                key: meta_key(prefix, name, lease),
                value: meta.encode(),
                lease,
                ..Default::default()
            };
            let put = RequestOp {
                request: Some(Request::Put(put)),
            };
            (v.clone().into_bytes(), Some(put))
        }
        _ => (meta.encode(), None),
    }
}

/// The deletion of the sibling of the candidate on `lease` (none there: nothing done).
pub fn forget(prefix: &str, name: &str, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::DeleteRange(DeleteRangeRequest {
            key: meta_key(prefix, name, lease),
            ..Default::default()
        })),
    }
}

/// True when `e`'s key holds no [`Meta`] JSON: another tool's, or an election's.
pub fn bare(e: &Entry) -> bool {
    serde_json::from_slice::<Meta>(&e.kv.value).is_err()
}

/// Gives each bare entry the [`Meta`] of its sibling among `siblings` (the keys under
/// [`meta_dir`]), when it has one on its own lease: an `etcdctl` contender has none.
pub fn join(entries: &mut [Entry], siblings: &[KeyValue], prefix: &str, name: &str) {
    for e in entries.iter_mut().filter(|e| bare(e)) {
        let key = meta_key(prefix, name, e.kv.lease);
        let found = siblings
            .iter()
            .find(|kv| kv.key == key && kv.lease == e.kv.lease);
        if let Some(meta) = found.and_then(|kv| serde_json::from_slice::<Meta>(&kv.value).ok()) {
            e.meta = meta;
        }
    }
}

/// Our own contender key `kv` read back: its JSON, or for an election's bare key `ours`
/// (what we wrote in its sibling), its token the key's mod revision.
pub fn own(kv: KeyValue, ours: Meta) -> Entry {
    let mut e = Entry::read(kv);
    if bare(&e) {
        e.meta = Meta {
            token: None,
            ..ours
        };
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Holder;

    fn meta(value: Option<&str>) -> Meta {
        Meta {
            owner: "o1".into(),
            depth: 1,
            holder: Holder {
                host: "h".into(),
                pid: 9,
                value: value.map(str::to_string),
                ..Holder::default()
            },
            ..Meta::default()
        }
    }

    #[test]
    fn an_election_key_holds_the_bare_value_and_its_sibling_the_rest() {
        let (value, sibling) = values("p/", "web", 0x1f, &meta(Some("primary A")));
        assert_eq!(value, b"primary A");
        let Some(Request::Put(put)) = sibling.and_then(|op| op.request) else {
            panic!("no sibling put");
        };
        assert_eq!(put.key, b"p/\0elect\0web\x001f");
        assert_eq!(put.lease, 0x1f);
        let (value, sibling) = values("p/", "web", 0x1f, &meta(None));
        assert!(sibling.is_none());
        assert!(serde_json::from_slice::<Meta>(&value).is_ok());
    }

    #[test]
    fn a_bare_key_is_joined_with_its_sibling_on_its_own_lease_only() {
        let kv = |key: Vec<u8>, value: Vec<u8>, lease| KeyValue {
            key,
            value,
            lease,
            ..KeyValue::default()
        };
        let mut entries = vec![
            Entry::read(kv(b"web/1f".to_vec(), b"primary A".to_vec(), 0x1f)),
            Entry::read(kv(b"web/2a".to_vec(), b"etcdctl's".to_vec(), 0x2a)),
        ];
        let siblings = [
            kv(
                meta_key("", "web", 0x1f),
                meta(Some("primary A")).encode(),
                0x1f,
            ),
            kv(meta_key("", "web", 0x2a), meta(None).encode(), 0x99),
        ];
        join(&mut entries, &siblings, "", "web");
        assert_eq!(entries[0].meta.owner, "o1");
        assert_eq!(entries[0].meta.holder.value.as_deref(), Some("primary A"));
        assert_eq!(
            entries[1].meta.owner, "2a",
            "another lease's sibling is not its own"
        );
        assert_eq!(entries[1].meta.holder.value.as_deref(), Some("etcdctl's"));
    }
}
