//! What the SQL stores (PostgreSQL, MySQL) share: the names they accept for their tables,
//! how a lease row reads as a [`LockInfo`], how an attempt's outcome becomes a lease, how
//! `status` and the last runs are put together from the rows read, and how a failure reads
//! (one line, the key named) and whether the next try may well not meet it.

use std::time::{Duration, Instant};

use super::group::{Group, Queued};
use super::store::{Attempt, Busy};
use super::{
    now_ms, AcquireRequest, Acquired, Holder, KeyStatus, LastRuns, Lease, LockInfo, WaiterInfo,
};
use crate::error::Error;
pub use crate::error::{io_error, passing_io};

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

/// A live lease row: key, owner, token, depth, holder, milliseconds left.
pub type HeldRow = (String, String, i64, i32, Option<String>, i64);

/// A live waiter row: key, waiter id, holder, priority; in queue order.
pub type WaitingRow = (String, String, Option<String>, i32);

/// The status of each of `names`, in order, from the live leases and waiters read for them.
pub fn statuses(names: Vec<String>, held: &[HeldRow], waiting: &[WaitingRow]) -> Vec<KeyStatus> {
    let statuses = names.into_iter().map(|key| {
        let row = held.iter().find(|r| r.0 == key);
        let group = row.and_then(|r| live_group(&r.1, r.4.as_deref(), r.5));
        let lock = row.map(|r| info(&key, &r.1, r.2, r.3, r.4.as_deref(), r.5));
        let waiters = waiting
            .iter()
            .filter(|r| r.0 == key)
            .map(|r| {
                let queued = Queued::read(r.2.as_deref().unwrap_or_default());
                WaiterInfo {
                    id: r.1.clone(),
                    holder: queued.holder,
                    sharing: queued.sharing,
                    priority: r.3,
                }
            })
            .collect();
        let status = match group {
            Some((g, now_ms)) => KeyStatus::group(&key, g.sharing, g.infos(&key, now_ms)),
            None => KeyStatus::exclusive(key, lock),
        };
        status.with_waiters(waiters)
    });
    statuses.collect()
}

/// The last run and last success kept in a key's row (none when the row has none, or
/// when they have expired).
pub fn last_runs(row: Option<(Option<String>, Option<String>)>) -> LastRuns {
    let parse = |json: Option<String>| json.and_then(|j| serde_json::from_str(&j).ok());
    match row {
        Some((last, success)) => LastRuns {
            last: parse(last),
            last_success: parse(success),
        },
        None => LastRuns::default(),
    }
}

/// `what` on the server `name` got no answer within `limit`: a paused server, or a
/// statement stuck behind a row lock. The connection is dropped and made again by the next
/// try, which may well be answered.
pub fn no_answer(name: &str, what: &str, limit: Duration) -> Error {
    Error::Transient(format!(
        "{name}: {what}: no answer within {}",
        humantime::format_duration(limit)
    ))
}

/// A failed request, `msg` its one line: [`Error::Transient`] when the next try may well
/// not meet it (`passing`), else [`Error::Unavailable`].
pub fn failure(passing: bool, msg: String) -> Error {
    match passing {
        true => Error::Transient(msg),
        false => Error::Unavailable(msg),
    }
}

/// SQLSTATEs that mean the same on both servers and pass: class 08, the connection failed
/// (made again by the next try), and a transaction [`rolled_back`].
pub fn passing_state(state: &str) -> bool {
    state.starts_with("08") || rolled_back(state)
}

/// The server rolled the whole transaction back to break a deadlock (40P01; MySQL says
/// 40001 for it too) or a serialization conflict (40001): nothing of it was kept, and
/// running it again at once is the answer.
pub fn rolled_back(state: &str) -> bool {
    matches!(state, "40001" | "40P01")
}

/// `e`, a failure of a request about `key` on the server `name`, naming the key: the
/// server's own messages ("NAME: cannot acquire: …") become "lock 'KEY' on NAME: …".
pub fn naming(key: &str, name: &str, e: Error) -> Error {
    e.map_message(|m| match m.strip_prefix(name) {
        Some(rest) if rest.starts_with(": ") => format!("lock '{key}' on {name}{rest}"),
        _ => m,
    })
}

#[cfg(test)]
mod tests {
    use super::{identifier, live_group, naming, no_answer, passing_state, statuses};
    use crate::backend::group::{Group, Member, GROUP_OWNER};
    use crate::backend::Sharing;

    fn member(until_ms: i64) -> Member {
        Member {
            owner: "a".into(),
            token: 1,
            depth: 1,
            until_ms,
            holder: Default::default(),
        }
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
    fn status_lists_every_live_member_and_the_first_on_top() {
        let mut g = Group::new(Sharing::Shared, member(1_000));
        g.join(Member {
            owner: "b".into(),
            token: 2,
            ..member(2_000)
        });
        // The row expires with its last member: `left_ms` from the store's now.
        let seen = |left_ms| {
            let row = (
                "k".into(),
                GROUP_OWNER.into(),
                5,
                1,
                Some(g.encode()),
                left_ms,
            );
            statuses(vec!["k".into()], &[row], &[]).remove(0)
        };
        let s = seen(1_500);
        let owners: Vec<&str> = s.holders.iter().map(|h| h.owner.as_str()).collect();
        assert_eq!((owners, s.sharing), (vec!["a", "b"], Sharing::Shared));
        assert_eq!(s.lock.as_ref().map(|l| l.fencing_token), Some(1));
        assert_eq!(s.holders[1].ttl_left_ms, Some(1_500));
        // A member past its end is no longer shown, and the next one is on top.
        let s = seen(800);
        assert_eq!(s.holders.len(), 1);
        assert_eq!(s.lock.as_ref().map(|l| l.owner.as_str()), Some("b"));
    }

    #[test]
    fn identifiers() {
        assert!(identifier("dlock_locks2").is_ok());
        assert!(identifier("_x").is_ok());
        for bad in ["", "Bad", "a;drop", "1a", "a-b", &"x".repeat(49)] {
            assert!(identifier(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn failures_that_pass_and_the_key_named() {
        assert!(passing_state("40001") && passing_state("40P01") && passing_state("08006"));
        assert!(!passing_state("28P01") && !passing_state("42501") && !passing_state("22003"));
        let name = "postgres://u:***@h:1/db";
        let e = no_answer(name, "cannot acquire", std::time::Duration::from_secs(3));
        assert!(e.is_retryable());
        let e = naming("k", name, e);
        assert!(e.is_retryable());
        assert_eq!(
            e.to_string(),
            format!("lock 'k' on {name}: cannot acquire: no answer within 3s")
        );
        let other = crate::error::Error::Unavailable("lock 'k' is held".into());
        assert_eq!(naming("k", name, other).to_string(), "lock 'k' is held");
    }
}
