//! The shape of Apache Curator's `InterProcessMutex` locks, as pure functions: lock paths,
//! contender node names, and what a node's data says. No I/O here.
//!
//! A lock is a (container) node whose children are its contenders, each an ephemeral
//! sequential node `_c_<uuid>-lock-<10-digit sequence>`; the lowest sequence holds, the
//! others wait in sequence order. dlock's nodes carry [`Meta`] as JSON; Curator's carry
//! the client's IP address.
//!
//! The name between the uuid and the sequence says how the node holds the key: `-lock-`
//! exclusively (Curator's `InterProcessMutex`), `__READ__` shared and `__WRIT__`
//! exclusively (the two sides of Curator's `InterProcessReadWriteLock`, whose nodes sit
//! under the lock path itself), `-limit<N>-` as one of a semaphore of N (dlock's own).

use serde::{Deserialize, Serialize};
use zookeeper_client::Stat;

use crate::backend::line::{self, Contender};
use crate::backend::{now_ms, AcquireRequest, Holder, Sharing};

/// What an exclusive contender's name holds between its uuid and its sequence.
pub const LOCK_NAME: &str = "-lock-";
/// The names of the read and the write side of Curator's `InterProcessReadWriteLock`.
pub const READ_NAME: &str = "-__READ__";
pub const WRITE_NAME: &str = "-__WRIT__";
/// A semaphore's contender: `-limit<N>-`.
const LIMIT_NAME: &str = "-limit";
/// Curator's protected-mode prefix: a client that lost the answer to its create finds
/// its node again by the uuid.
pub const PROTECTED: &str = "_c_";
/// Appended to a lock's path for the node that keeps its run records.
pub const RUNS_SUFFIX: &str = ".dlock-runs";

/// True for a character ZooKeeper refuses in a path (its `PathUtils.validatePath`, which
/// reads UTF-16 units): controls (U+0000-U+001F, U+007F-U+009F), U+D800-U+F8FF (the
/// surrogates, so every character beyond U+FFFF, and the private use area) and
/// U+FFF0-U+FFFF.
pub fn refused_char(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}')
        || c >= '\u{fff0}'
}

/// Why `path` is not a valid ZooKeeper path, if it is not. Control characters are named
/// by their code, never printed.
pub fn check_path(path: &str) -> std::result::Result<(), String> {
    if let Some(c) = path.chars().find(|&c| refused_char(c)) {
        let shown: String = path
            .chars()
            .map(|c| match refused_char(c) {
                true => '?',
                false => c,
            })
            .collect();
        return Err(format!(
            "'{shown}' has a character ZooKeeper refuses in a path (U+{:04X})",
            c as u32
        ));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("'{path}' must start with '/'"));
    };
    for part in rest.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(format!("'{path}' has an empty, '.' or '..' component"));
        }
    }
    Ok(())
}

/// Refuses `path` when it is in ZooKeeper's own tree, `/zookeeper`.
pub fn check_not_own_tree(path: &str) -> std::result::Result<(), String> {
    match path == "/zookeeper" || path.starts_with("/zookeeper/") {
        true => Err(format!("'{path}' is ZooKeeper's own tree")),
        false => Ok(()),
    }
}

/// The lock path of a dlock key: `/KEY` (a leading `/` in the key is optional, so that
/// `dlock exec /locks/job` names the path a Curator client gives).
pub fn lock_path(key: &str) -> std::result::Result<String, String> {
    let path = format!("/{}", key.trim_start_matches('/'));
    check_path(&path)?;
    check_not_own_tree(&path)?;
    if path.ends_with(RUNS_SUFFIX) {
        return Err(format!(
            "'{path}' ends with {RUNS_SUFFIX}, kept for run records"
        ));
    }
    Ok(path)
}

/// The key `status` shows for a lock path found by listing: without the leading `/`.
pub fn key_of(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

/// A new protection id: a random (version 4) UUID in its 36-character form, the shape
/// Curator's `ProtectedUtils` recognises between `_c_` and the rest of a name.
pub fn protection_id() -> String {
    let hi = (crate::ids::random_u64() & !0xf000) | 0x4000;
    let lo = (crate::ids::random_u64() & !(0b11 << 62)) | (0b10 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// The prefix of a new contender's name for a caller holding as `sharing` (the server
/// appends the sequence).
pub fn node_prefix(path: &str, uuid: &str, sharing: Sharing) -> String {
    let name = match sharing {
        Sharing::Exclusive => LOCK_NAME.to_string(),
        Sharing::Shared => READ_NAME.to_string(),
        Sharing::Limit(n) => format!("{LIMIT_NAME}{n}-"),
    };
    format!("{path}/{PROTECTED}{uuid}{name}")
}

/// How a contender holds the key and its sequence, when `name` is a contender's.
pub fn parse(name: &str) -> Option<(Sharing, u64)> {
    let at = name.len().checked_sub(10)?;
    let (head, seq) = (name.get(..at)?, name.get(at..)?);
    if !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sharing = if head.ends_with(LOCK_NAME) || head.ends_with(WRITE_NAME) {
        Sharing::Exclusive
    } else if head.ends_with(READ_NAME) {
        Sharing::Shared
    } else {
        let (_, n) = head.strip_suffix('-')?.rsplit_once(LIMIT_NAME)?;
        Sharing::limit(n.parse().ok()?)?
    };
    Some((sharing, seq.parse().ok()?))
}

/// The sequence of a contender's name, when it is one.
pub fn sequence(name: &str) -> Option<u64> {
    parse(name).map(|(_, seq)| seq)
}

/// How the contender `name` holds the key (exclusively when it is no contender's).
pub fn sharing_of(name: &str) -> Sharing {
    parse(name).map_or(Sharing::Exclusive, |(sharing, _)| sharing)
}

/// The contenders among `children`, lowest sequence (the holder) first.
pub fn contenders(mut children: Vec<String>) -> Vec<String> {
    children.retain(|c| sequence(c).is_some());
    children.sort_by_key(|c| sequence(c));
    children
}

/// What dlock stores in its contender nodes: the line's [`line::Meta`], with ZooKeeper's
/// own [`Detached`] (how a node holds is its name's to say, not its JSON's).
pub type Meta = line::Meta<Detached>;

/// What a ZooKeeper contender's JSON keeps that no other store's does.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Detached {
    /// A detached lease (a persistent TTL node): when it ends, ms since the Unix epoch.
    /// dlock honours it itself: the server reaps TTL nodes only now and then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

/// The data of `req`'s node from now: depth 1, no token yet, and a detached lease's
/// expiry.
pub fn fresh_meta(req: &AcquireRequest) -> Meta {
    Meta {
        owner: req.owner.clone(),
        depth: 1,
        own: Detached {
            expires_at_ms: req.detached.then(|| now_ms() + req.ttl.as_millis() as u64),
        },
        holder: Holder {
            acquired_at_ms: now_ms(),
            ..req.holder.clone()
        },
        ..Meta::default()
    }
}

/// One contender node, read back.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name under the lock path.
    pub name: String,
    /// The zxid of its last write, and its version (for compare-and-set writes).
    pub mzxid: i64,
    pub version: i32,
    pub meta: Meta,
    /// How it holds the key, from its name.
    pub sharing: Sharing,
    /// Written by another client (Curator): its data is not dlock's.
    pub foreign: bool,
}

/// The Curator recipe whose contender `name` is, for status.
fn curator_recipe(name: &str) -> &'static str {
    if name.contains(READ_NAME) || name.contains(WRITE_NAME) {
        "(Curator InterProcessReadWriteLock)"
    } else {
        "(Curator InterProcessMutex)"
    }
}

impl Entry {
    /// Reads a contender node; one that is not dlock's JSON (Curator's, whose data is the
    /// client's IP address) is named by its node name.
    pub fn read(name: &str, data: &[u8], stat: &Stat) -> Entry {
        let sharing = sharing_of(name);
        match serde_json::from_slice::<Meta>(data) {
            Ok(meta) => Entry {
                name: name.to_string(),
                mzxid: stat.mzxid,
                version: stat.version,
                meta,
                sharing,
                foreign: false,
            },
            Err(_) => Entry {
                name: name.to_string(),
                mzxid: stat.mzxid,
                version: stat.version,
                meta: Meta {
                    owner: name.to_string(),
                    depth: 1,
                    holder: Holder {
                        host: String::from_utf8_lossy(data).chars().take(64).collect(),
                        command: curator_recipe(name).into(),
                        acquired_at_ms: stat.mtime.max(0) as u64,
                        ..Holder::default()
                    },
                    ..Meta::default()
                },
                sharing,
                foreign: true,
            },
        }
    }

    /// A contender whose data these credentials may not read (its ACL): it is there all
    /// the same, named by its node name.
    pub fn unreadable(name: &str, stat: &Stat) -> Entry {
        let mut entry = Entry::read(name, &[], stat);
        entry.meta.holder.command = "(its node's ACL hides who it is)".into();
        entry
    }

    /// True for a detached lease whose time is up: it is free, whatever the server says.
    pub fn expired(&self) -> bool {
        self.meta.own.expires_at_ms.is_some_and(|at| now_ms() >= at)
    }
}

impl Contender for Entry {
    type Own = Detached;

    fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The node's mzxid: the zxid of the write that stamped it.
    fn written(&self) -> u64 {
        self.mzxid.max(0) as u64
    }

    /// Its node name, as a Curator holder is known.
    fn named(&self, owner: &str) -> bool {
        self.name == owner
    }

    /// As its name says.
    fn sharing(&self) -> Sharing {
        self.sharing
    }

    /// Time left on a detached lease; `None` for a session's node.
    fn ttl_left_ms(&self) -> Option<u64> {
        self.meta
            .own
            .expires_at_ms
            .map(|at| at.saturating_sub(now_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_names() {
        let a = "_c_0b6f1a2c-3d4e-4f50-8a9b-0c1d2e3f4a5b-lock-0000000012";
        let b = "_c_ffffffff-3d4e-4f50-8a9b-0c1d2e3f4a5b-lock-0000000003";
        assert_eq!(sequence(a), Some(12));
        assert_eq!(sequence("x-lock-12"), None);
        assert_eq!(sequence("other"), None);
        let sorted = contenders(vec![a.into(), "junk".into(), b.into()]);
        assert_eq!(sorted, [b, a]);
        assert_eq!(node_prefix("/l", "u", Sharing::Exclusive), "/l/_c_u-lock-");
    }

    /// As Curator's `ProtectedUtils.isProtectedZNode` reads a name: `_c_`, a UUID, `-` at
    /// index 39, more after it.
    #[test]
    fn protection_ids_are_uuids() {
        let (a, b) = (protection_id(), protection_id());
        assert_ne!(a, b);
        let name = node_prefix("/l", &a, Sharing::Exclusive) + "0000000001";
        let name = name.rsplit('/').next().unwrap();
        assert_eq!(name.len(), 3 + 36 + "-lock-".len() + 10, "{name}");
        assert!(
            name.starts_with(PROTECTED) && name.as_bytes()[39] == b'-',
            "{name}"
        );
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{a}");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()), "{a}");
        assert_eq!(a.as_bytes()[14], b'4', "version 4: {a}");
        assert!(
            matches!(a.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "variant: {a}"
        );
        assert_eq!(sequence(name), Some(1));
    }

    #[test]
    fn names_say_how_a_node_holds() {
        let read = node_prefix("/l", "u", Sharing::Shared) + "0000000007";
        assert_eq!(read, "/l/_c_u-__READ__0000000007");
        let name = read.rsplit('/').next().unwrap();
        assert_eq!(parse(name), Some((Sharing::Shared, 7)));
        let write = "_c_0b6f1a2c-3d4e-4f50-8a9b-0c1d2e3f4a5b-__WRIT__0000000008";
        assert_eq!(parse(write), Some((Sharing::Exclusive, 8)));
        let sem = node_prefix("/l", "u", Sharing::Limit(4)) + "0000000009";
        assert_eq!(sem, "/l/_c_u-limit4-0000000009");
        assert_eq!(
            parse("_c_u-limit4-0000000009"),
            Some((Sharing::Limit(4), 9))
        );
        for junk in [
            "_c_u-limit0-0000000009",
            "_c_u-limitx-0000000009",
            "_c_u-__READ__12",
        ] {
            assert_eq!(parse(junk), None, "{junk}");
        }
        assert_eq!(curator_recipe(write), "(Curator InterProcessReadWriteLock)");
    }

    #[test]
    fn keys_to_paths() {
        assert_eq!(lock_path("job").unwrap(), "/job");
        assert_eq!(lock_path("/locks/job").unwrap(), "/locks/job");
        for bad in ["", "a//b", "a/", "zookeeper/x", "a/../b", "j.dlock-runs"] {
            assert!(lock_path(bad).is_err(), "{bad}");
        }
        assert_eq!(key_of("/locks/job"), "locks/job");
    }

    /// The characters ZooKeeper's `PathUtils.validatePath` refuses, at the edges of each
    /// range, and their neighbours it takes.
    #[test]
    fn characters_zookeeper_refuses() {
        for bad in [
            '\u{0}',
            '\u{1f}',
            '\u{7f}',
            '\u{9f}',
            '\u{e000}',
            '\u{f8ff}',
            '\u{fff0}',
            '\u{fff5}',
            '\u{ffff}',
            '\u{10000}',
            '🔒',
        ] {
            let key = format!("job-{bad}");
            let e = lock_path(&key).unwrap_err();
            assert!(e.contains(&format!("U+{:04X}", bad as u32)), "{e}");
            assert!(!e.contains(bad), "printed raw: {e:?}");
            assert!(check_path(&format!("/{key}")).is_err());
        }
        for good in [' ', '~', '\u{a0}', 'é', '\u{d7ff}', '\u{f900}', '\u{ffef}'] {
            assert!(lock_path(&format!("job-{good}")).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn curator_nodes_read_as_such() {
        let stat = Stat {
            czxid: 9,
            mzxid: 9,
            pzxid: 9,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 1,
            data_length: 8,
            num_children: 0,
        };
        let e = Entry::read("_c_x-lock-0000000001", b"10.0.0.7", &stat);
        assert!(e.foreign);
        assert_eq!(e.meta.holder.host, "10.0.0.7");
        assert!(e.owned_by("_c_x-lock-0000000001"));
        assert_eq!(e.token(), 9);
        assert_eq!(e.ttl_left_ms(), None);
    }
}
