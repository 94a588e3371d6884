//! A lease row as the SQL stores read and write it: the table names they accept, the
//! holder JSON, a live lease as a [`LockInfo`], an attempt's outcome and a renewal as a
//! lease.

use std::time::{Duration, Instant};

use crate::backend::group::Group;
use crate::backend::store::{Attempt, Busy};
use crate::backend::{now_ms, AcquireRequest, Acquired, Holder, Lease, LockInfo};

/// A table name dlock accepts: plain lower-case, so that it needs no quoting rules of its
/// own in either dialect and leaves room for the `_waiters` suffix. The error completes
/// "table …".
pub fn identifier(name: &str) -> std::result::Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match ok {
        true => Ok(name.to_string()),
        false => Err(format!(
            "'{name}' must be lower-case letters, digits and '_' (at most 48)"
        )),
    }
}

/// The holder JSON of a row (a row written by hand may lack it).
pub fn holder_of(json: Option<&str>) -> Holder {
    json.and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

/// `holder` as a row keeps it (JSON), acquired now: a grant's or a waiter's.
pub fn holder_json(holder: &Holder) -> String {
    serde_json::to_string(&Holder {
        acquired_at_ms: now_ms(),
        ..holder.clone()
    })
    .unwrap_or_default()
}

/// A live lease as `status` and a refusal show it.
pub fn info(
    key: &str,
    owner: &str,
    token: i64,
    depth: i32,
    holder: Option<&str>,
    left_ms: i64,
) -> LockInfo {
    LockInfo {
        key: key.to_string(),
        owner: owner.to_string(),
        fencing_token: token.max(0) as u64,
        holder: holder_of(holder),
        ttl_left_ms: Some(left_ms.max(0) as u64),
        depth: depth.max(0) as u32,
    }
}

/// The live members of the group a live row of `owner` keeps in `holder`, with the
/// store's now in the members' clock: the row expires with its last member, `left_ms`
/// from now. `None` for an exclusive lease (or a group with no member left).
pub fn live_group(owner: &str, holder: Option<&str>, left_ms: i64) -> Option<(Group, i64)> {
    let group = Group::read(Some(owner), holder)?;
    let now_ms = group.until_ms() - left_ms.max(1);
    Some((group.alive(now_ms)?, now_ms))
}

/// What an attempt's transaction decided, before it is turned into a lease.
// One per attempt, moved once and matched at once: boxing the larger variant would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    Granted {
        owner: String,
        token: i64,
        reentered: bool,
    },
    Busy(Busy),
}

impl Outcome {
    /// The attempt as the waiting loop takes it: a granted lease counts from `sent_at`,
    /// when the attempt was sent.
    pub fn attempt(self, req: &AcquireRequest, sent_at: Instant) -> Attempt {
        match self {
            Outcome::Busy(busy) => Attempt::Busy(busy),
            Outcome::Granted {
                owner,
                token,
                reentered,
            } => Attempt::Granted(Acquired {
                lease: Lease::timed(
                    &req.key,
                    owner,
                    token.max(0) as u64,
                    req.ttl,
                    reentered,
                    sent_at,
                ),
                guard: None,
            }),
        }
    }
}

/// `d` in whole milliseconds, as the statements take a TTL.
pub fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// A renewed lease: `token` as it stands, `left_ms` what the server says is left of it.
pub fn renewed(
    key: &str,
    owner: &str,
    ttl: Duration,
    sent_at: Instant,
    (token, left_ms): (i64, i64),
) -> Lease {
    let lease = Lease::timed(key, owner, token.max(0) as u64, ttl, false, sent_at);
    lease.expiring_in(Duration::from_millis(left_ms.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::{identifier, live_group};
    use crate::backend::group::{self, Group, Member, GROUP_OWNER};
    use crate::backend::Sharing;

    /// Owner `a`, token 1, live until `until_ms`.
    fn member(until_ms: i64) -> Member {
        group::member("a", 1, until_ms)
    }

    #[test]
    fn a_group_row_reads_as_its_live_members() {
        let mut g = Group::new(Sharing::Shared, member(100));
        g.join(Member {
            owner: "b".into(),
            ..member(300)
        });
        let json = g.encode();
        // 50 ms left of the row: now is 250 on the members' clock, and "a" is gone.
        let (live, now) = live_group(GROUP_OWNER, Some(&json), 50).unwrap();
        assert_eq!((live.members.len(), now), (1, 250));
        assert_eq!(live.members[0].owner, "b");
        assert!(live_group("0123abcd", Some(&json), 50).is_none());
        assert!(live_group(GROUP_OWNER, None, 50).is_none());
    }

    #[test]
    fn identifiers() {
        assert!(identifier("dlock_locks2").is_ok());
        assert!(identifier("_x").is_ok());
        for bad in ["", "Bad", "a;drop", "1a", "a-b", &"x".repeat(49)] {
            assert!(identifier(bad).is_err(), "{bad}");
        }
    }
}
