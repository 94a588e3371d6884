//! The item layout, and the value of a lock item.
//!
//! One lock `NAME` is three items:
//! * `dlock:lock:NAME`: the lease (JSON of [`Record`]), with the lease's TTL;
//! * `dlock:token:NAME`: the fencing counter, never expiring (it may still be evicted);
//! * `dlock:runs:NAME`: the last-run records (JSON of `LastRuns`).
//!
//! Memcached keys are at most 250 bytes of printable ASCII without spaces, so the name is
//! percent-encoded: every byte outside `A-Za-z0-9-_.:/` becomes `%XX`.

use serde::{Deserialize, Serialize};

use crate::backend::{Holder, LockInfo};
use crate::error::{Error, Result};

/// What every lock item's key starts with.
pub const LOCK: &str = "dlock:lock:";
const TOKEN: &str = "dlock:token:";
const RUNS: &str = "dlock:runs:";
/// Memcached's longest key.
const MAX_KEY: usize = 250;

/// The items of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub lock: String,
    pub token: String,
    pub runs: String,
}

impl Keys {
    /// The items of lock `name`, or a usage error when the encoded name is too long.
    pub fn of(name: &str, backend: &str) -> Result<Keys> {
        let enc = encode(name);
        if RUNS.len().max(TOKEN.len()).max(LOCK.len()) + enc.len() > MAX_KEY {
            return Err(Error::Usage(format!(
                "lock '{name}' is too long for {backend}: memcached keys hold at most {MAX_KEY} bytes, and this name takes {} once encoded",
                enc.len()
            )));
        }
        Ok(Keys {
            lock: format!("{LOCK}{enc}"),
            token: format!("{TOKEN}{enc}"),
            runs: format!("{RUNS}{enc}"),
        })
    }
}

fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.:/".contains(&b)
}

/// Percent-encodes a lock name into a memcached key.
pub fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Undoes `%XX` escapes ([`encode`], and the URI encoding of `lru_crawler metadump`).
pub fn decode(s: &str) -> Option<String> {
    crate::backend::url::percent_decode(s)
}

/// The lock name of a `key=…` line of `lru_crawler metadump`, if it is a lock item.
pub fn name_in_dump(line: &str) -> Option<String> {
    let key = line.split(' ').find_map(|t| t.strip_prefix("key="))?;
    decode(decode(key)?.strip_prefix(LOCK)?)
}

/// The value of a lock item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub owner: String,
    /// Zero between the add that took the key and the write that records the token.
    pub token: u64,
    pub depth: u32,
    pub holder: Holder,
    /// The holders of a key held shared or as a semaphore, under the owner
    /// [`GROUP_OWNER`](crate::backend::group::GROUP_OWNER) (see `shared.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<crate::backend::group::Group>,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record serializes")
    }

    pub fn decode(bytes: &[u8], name: &str, backend: &str) -> Result<Record> {
        serde_json::from_slice(bytes).map_err(|e| {
            Error::Unavailable(format!(
                "{backend}: lock '{name}': its item is not a dlock lease ({e})"
            ))
        })
    }

    /// What `status` shows; `ttl_left` from the item's remaining TTL in seconds.
    pub fn info(&self, name: &str, ttl_left: Option<i64>) -> LockInfo {
        LockInfo {
            key: name.to_string(),
            owner: self.owner.clone(),
            fencing_token: self.token,
            holder: self.holder.clone(),
            ttl_left_ms: ttl_left.filter(|t| *t >= 0).map(|t| t as u64 * 1000),
            depth: self.depth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in ["job", "st x", "a/b:c", "ünï %20", "tab\there"] {
            let enc = encode(name);
            assert!(enc.bytes().all(|b| b.is_ascii_graphic()), "{enc}");
            assert_eq!(decode(&enc).as_deref(), Some(name));
        }
        let keys = Keys::of("st x", "m").unwrap();
        assert_eq!(keys.lock, "dlock:lock:st%20x");
        // metadump URI-encodes the key once more.
        let line = "key=dlock%3Alock%3Ast%2520x exp=10 la=1 cas=2 fetch=no cls=1 size=80";
        assert_eq!(name_in_dump(line).as_deref(), Some("st x"));
        assert_eq!(name_in_dump("key=dlock%3Atoken%3Ax exp=-1"), None);
        let e = Keys::of(&"x".repeat(240), "memcached://h:1").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("memcached://h:1"), "{e}");
    }
}
