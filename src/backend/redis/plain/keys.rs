//! The names of dlock's own keys beside an application's lock key K (`?layout=plain`).
//!
//! K is the application's, verbatim: dlock writes nothing else under it. Its two keys are
//!
//! | key | type | content |
//! |---|---|---|
//! | `dlock:plain:{T}:K:fence` | STRING | fencing counter, `INCR`ed with each `SET` that dlock wins; never deleted, never expires |
//! | `dlock:plain:{T}:K:meta` | HASH | owner, token, depth, holder, acquired_ms of dlock's holder (the lease hash's fields); `PEXPIRE` with K |
//!
//! A script may only touch keys of one Cluster slot, so `{T}` must hash to K's slot. A
//! Redis key is hashed by its hash string: the text between its first `{` and the first
//! `}` after it when that is not empty, the whole name otherwise. The rule:
//!
//! * T is K's hash string (K itself when K has no hash tag; `42` for `user:{42}:lock`),
//!   whenever it holds no `}`: then `{T}` is our names' tag, and hashes as K does;
//! * otherwise (K has no tag and holds a `}`, e.g. `a}b` or `x{}y`) no tag can spell T,
//!   and T is the first decimal number (`0`, `1`, …) whose slot is K's slot.

/// The prefix of every key of `?layout=plain`.
const PREFIX: &str = "dlock:plain:{";

/// One SCAN finds every holder hash (and nothing else of ours).
pub(super) const SCAN_PATTERN: &str = "dlock:plain:{*:meta";

/// The names beside lock key `K`.
#[derive(Debug, Clone)]
pub(super) struct PlainKeys {
    pub(super) fence: String,
    pub(super) meta: String,
}

impl PlainKeys {
    pub(super) fn new(key: &str) -> PlainKeys {
        let tag = tag(key);
        let name = |suffix: &str| format!("{PREFIX}{tag}}}:{key}{suffix}");
        PlainKeys {
            fence: name(":fence"),
            meta: name(":meta"),
        }
    }
}

/// The lock key K of a holder hash's name (see [`SCAN_PATTERN`]); `None` for a name not
/// built by [`PlainKeys::new`].
pub(super) fn lock_name(meta: &str) -> Option<&str> {
    let rest = meta.strip_prefix(PREFIX)?;
    let (tag_text, rest) = rest.split_once('}')?;
    let key = rest.strip_prefix(':')?.strip_suffix(":meta")?;
    (tag(key) == tag_text).then_some(key)
}

/// The hash tag of our names beside `key` (see the module's rule).
fn tag(key: &str) -> String {
    let hashed = hash_string(key);
    if !hashed.contains(&b'}') {
        return String::from_utf8_lossy(hashed).into_owned();
    }
    let slot = slot(hashed);
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| self::slot(n.as_bytes()) == slot)
        .expect("every slot has a decimal name")
}

/// What Redis Cluster hashes of `key`: its hash tag's text, or the whole name.
fn hash_string(key: &str) -> &[u8] {
    let bytes = key.as_bytes();
    if let Some(open) = bytes.iter().position(|&b| b == b'{') {
        if let Some(len) = bytes[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &bytes[open + 1..open + 1 + len];
            }
        }
    }
    bytes
}

/// The Cluster slot of a hash string: CRC16 (XMODEM) modulo 16384.
fn slot(hashed: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Cluster slot of a key name.
    fn key_slot(key: &str) -> u16 {
        slot(hash_string(key))
    }

    /// Keys of every shape: plain, tagged, an empty tag, braces that make no tag.
    const SHAPES: [&str; 9] = [
        "deploy",
        "user:{42}:lock",
        "{}",
        "x{}y",
        "a}b",
        "}{",
        "{a}b}",
        "ünï/cødé lock",
        "job:{x:",
    ];

    #[test]
    fn crc16_is_redis_cluster_s() {
        // The values `CLUSTER KEYSLOT` gives.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("123456789"), 0x31C3);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), slot(b"foo{}{bar}"));
    }

    #[test]
    fn side_keys_share_the_slot_of_every_shape_of_key() {
        for key in SHAPES {
            let k = PlainKeys::new(key);
            for name in [&k.fence, &k.meta] {
                assert_eq!(key_slot(name), key_slot(key), "{key:?} -> {name:?}");
                assert!(name.starts_with(PREFIX), "{name}");
            }
        }
    }

    #[test]
    fn names_are_readable_where_they_can_be_and_are_read_back() {
        assert_eq!(
            PlainKeys::new("deploy").meta,
            "dlock:plain:{deploy}:deploy:meta"
        );
        assert_eq!(
            PlainKeys::new("user:{42}:lock").fence,
            "dlock:plain:{42}:user:{42}:lock:fence"
        );
        for key in SHAPES {
            assert_eq!(lock_name(&PlainKeys::new(key).meta), Some(key), "{key:?}");
        }
        assert_eq!(lock_name("dlock:plain:{x}:y:meta"), None);
        assert_eq!(lock_name("dlock:{deploy}:lease"), None);
    }

    #[test]
    fn different_keys_never_share_a_name() {
        let names: std::collections::HashSet<String> =
            SHAPES.iter().map(|k| PlainKeys::new(k).meta).collect();
        assert_eq!(names.len(), SHAPES.len());
    }
}
