//! The Redis names of one lock's keys and channels: the key layout, built here only.
//!
//! For lock key `K`; the hash tag `{K}` puts every key of one lock in one Redis Cluster slot,
//! so each script touches a single slot.
//!
//! | key | type | content |
//! |---|---|---|
//! | `dlock:{K}:lease` | HASH | owner, token, depth, holder (JSON `[host, pid, user, command, requested_ms]`), acquired_ms, and held_until (server ms) once `exec --hold-at-least` leaves it held after its run; `PEXPIRE` = TTL |
//! | `dlock:{K}:fence` | STRING | fencing counter, `INCR`ed on every fresh grant; never deleted, never expires |
//! | `dlock:{K}:queue` | ZSET | waiter id → `-priority * 2^32 + arrival ticket` (`join` in `common.lua`): highest priority first, then first come first served |
//! | `dlock:{K}:alive` | ZSET | waiter id → liveness deadline (server ms), refreshed by each poll |
//! | `dlock:{K}:info` | HASH | waiter id → the waiter's [`Holder`](crate::backend::Holder) as the same JSON array, for `status`; prefixed `s\|` or `N\|` when the waiter asks for `--shared` or `--limit N`, so that admission knows what each waiter ahead needs; field `!` → the pending `--supersede` waiter, field `#` → the last arrival ticket (`HINCRBY`) |
//! | `dlock:{K}:group` | HASH | shared (`--shared`) or semaphore (`--limit N`) holders: owner → `token\|depth\|acquired_ms\|held_until\|holder JSON`, and `=` → how they hold the key (`s`, or N); `PEXPIRE` = the latest holder's end. Never beside a lease: an exclusive holder always has the lease |
//! | `dlock:{K}:ends` | ZSET | group holder owner → end of its lease (server ms): a dead holder's place is dropped there by the next script that looks |
//! | `dlock:{K}:lastrun` | STRING | the last run's [`RunRecord`](crate::backend::RunRecord) as JSON; `PX` = `RUN_RECORD_TTL` from its write |
//! | `dlock:{K}:lastok` | STRING | the last successful run's, the same way |
//!
//! | `dlock:{K}:wake:<waiter id>` | LIST | a pending wake-up of that fair waiter (expires after 60 s) |
//! | `dlock:{K}:wake:<waiter id>!` | STRING | the holder JSON of the newer `--supersede` waiter that replaced that waiter (expires after 60 s) |
//! | `dlock:{K}:unfair` | STRING | set (for twice the liveness window) by every refused unfair attempt, and by `dlock wait` (for at least a minute): a release publishes on the released channel only while it exists |
//!
//! The three queue keys get a TTL of twice the liveness window on every refresh, so they
//! vanish on their own when every waiter has died. The channel `dlock:{K}:released` wakes
//! unfair waiters.

/// One SCAN finds `dlock:{K}:lease`, `dlock:{K}:queue` and `dlock:{K}:group`, and no
/// other key of ours, so listing walks the keyspace once.
pub(super) const SCAN_PATTERN: &str = "dlock:*:[lqg][eur][aeo][su][ep]";

/// The Redis names of one lock's keys and channels.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    pub(super) lease: String,
    pub(super) fence: String,
    pub(super) queue: String,
    pub(super) alive: String,
    pub(super) info: String,
    pub(super) wake_prefix: String,
    pub(super) released: String,
    pub(super) unfair: String,
    pub(super) group: String,
    pub(super) ends: String,
}

impl Keys {
    pub(super) fn new(key: &str) -> Keys {
        Keys {
            lease: key_name(key, ":lease"),
            fence: key_name(key, ":fence"),
            queue: key_name(key, ":queue"),
            alive: key_name(key, ":alive"),
            info: key_name(key, ":info"),
            wake_prefix: key_name(key, ":wake:"),
            released: key_name(key, ":released"),
            unfair: key_name(key, ":unfair"),
            group: key_name(key, ":group"),
            ends: key_name(key, ":ends"),
        }
    }

    /// The wake list of waiter `id`.
    pub(super) fn wake(&self, id: &str) -> String {
        format!("{}{id}", self.wake_prefix)
    }
}

/// The lock key `K` of a Redis key `dlock:{K}<suffix>`, e.g. suffix `:lease`.
pub(super) fn lock_name<'a>(redis_key: &'a str, suffix: &str) -> Option<&'a str> {
    redis_key
        .strip_prefix("dlock:{")?
        .strip_suffix(suffix)?
        .strip_suffix('}')
}

/// The lease key of lock `key` (see [`Keys`]; cheaper when listing many locks).
pub(super) fn lease_key(key: &str) -> String {
    key_name(key, ":lease")
}

/// The keys of lock `key`'s last run and last success (see the table above); not matched
/// by [`SCAN_PATTERN`], so listing never takes them for locks.
pub(super) fn run_keys(key: &str) -> [String; 2] {
    [key_name(key, ":lastrun"), key_name(key, ":lastok")]
}

/// `dlock:{K}<suffix>`, built in one allocation of the exact size (this runs several
/// times per acquire and release; `format!` costs more).
fn key_name(key: &str, suffix: &str) -> String {
    const PREFIX: &str = "dlock:{";
    let mut name = String::with_capacity(PREFIX.len() + key.len() + 1 + suffix.len());
    name.push_str(PREFIX);
    name.push_str(key);
    name.push('}');
    name.push_str(suffix);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_tag() {
        let k = Keys::new("deploy/prod");
        for name in [
            &k.lease, &k.fence, &k.queue, &k.alive, &k.info, &k.group, &k.ends,
        ] {
            assert!(name.starts_with("dlock:{deploy/prod}:"), "{name}");
        }
    }

    #[test]
    fn lock_names_are_read_back() {
        let k = Keys::new("a}:b{c");
        assert_eq!(lock_name(&k.lease, ":lease"), Some("a}:b{c"));
        assert_eq!(lock_name(&k.queue, ":queue"), Some("a}:b{c"));
        assert_eq!(lock_name(&k.fence, ":lease"), None);
    }
}
