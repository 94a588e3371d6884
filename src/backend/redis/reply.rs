//! Reading what the server answers: script and pipeline replies, lease fields, and the
//! holder as it is stored beside a lease or a waiter.

use redis::{FromRedisValue, Value};

use std::collections::HashMap;

use crate::backend::{Holder, LockInfo, Sharing};
use crate::error::{Error, Result};

/// The lease hash fields read back, in this order (see [`lock_info`]). The holder's host,
/// pid, user and command travel as one JSON field: a grant stores 5 fields, not 8.
/// `held_until` is written only by `exec --hold-at-least` once its run has finished.
pub(super) const LEASE_FIELDS: [&str; 6] = [
    "owner",
    "token",
    "depth",
    "holder",
    "acquired_ms",
    "held_until",
];

/// A script or pipeline reply, read front to back.
pub(super) struct Reply<'a> {
    items: std::vec::IntoIter<Value>,
    url: &'a str,
}

impl<'a> Reply<'a> {
    pub(super) fn new(reply: Value, url: &'a str) -> Result<Reply<'a>> {
        match reply {
            Value::Array(items) => Ok(Reply {
                items: items.into_iter(),
                url,
            }),
            other => Err(Error::Internal(format!(
                "unexpected reply from {url}: {other:?}"
            ))),
        }
    }

    pub(super) fn next<T: FromRedisValue>(&mut self) -> Result<T> {
        let value = self.items.next().unwrap_or(Value::Nil);
        redis::from_redis_value(value)
            .map_err(|e| Error::Internal(format!("unexpected reply from {}: {e}", self.url)))
    }

    /// The lease fields that follow (see [`LEASE_FIELDS`]).
    pub(super) fn lease_fields(&mut self) -> Result<Vec<Option<String>>> {
        (0..LEASE_FIELDS.len()).map(|_| self.next()).collect()
    }
}

/// A lock's state from its lease fields (in [`LEASE_FIELDS`] order) and PTTL; `None` when
/// free.
pub(super) fn lock_info(key: &str, fields: Vec<Option<String>>, pttl: i64) -> Option<LockInfo> {
    let [owner, token, depth, holder, acquired, until]: [Option<String>; 6] =
        fields.try_into().ok()?;
    let num = |s: Option<String>| s.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let holder = holder.as_deref().and_then(parse_holder);
    Some(LockInfo {
        key: key.to_string(),
        owner: owner?,
        fencing_token: num(token),
        depth: num(depth) as u32,
        holder: Holder {
            acquired_at_ms: num(acquired), // the holder's clock at the grant
            held_until_ms: until.and_then(|s| s.parse().ok()),
            ..holder.unwrap_or_default()
        },
        ttl_left_ms: u64::try_from(pttl).ok(),
    })
}

/// The holders of a group (see `keys.rs`), from its hash and its ends (owner, server ms),
/// at server time `now_ms`, in the order they were granted (by token), with how they hold
/// it; `None` when none is left.
pub(super) fn group_holders(
    key: &str,
    mut entries: HashMap<String, String>,
    ends: Vec<(String, f64)>,
    now_ms: f64,
) -> Option<(Sharing, Vec<LockInfo>)> {
    let sharing = parse_sharing(&entries.remove("=")?);
    let mut holders: Vec<LockInfo> = ends
        .into_iter()
        .filter(|(_, end)| *end > now_ms)
        .filter_map(|(owner, end)| {
            let entry = entries.remove(&owner)?;
            let mut f = entry.splitn(5, '|');
            let mut num = || f.next().and_then(|s| s.parse::<u64>().ok());
            let (token, depth, acquired, until) = (num(), num(), num(), num());
            let holder = f.next().and_then(parse_holder).unwrap_or_default();
            Some(LockInfo {
                key: key.to_string(),
                owner,
                fencing_token: token?,
                depth: depth.unwrap_or(1) as u32,
                holder: Holder {
                    acquired_at_ms: acquired.unwrap_or(0),
                    held_until_ms: until,
                    ..holder
                },
                ttl_left_ms: Some((end - now_ms) as u64),
            })
        })
        .collect();
    holders.sort_by_key(|h| h.fencing_token);
    (!holders.is_empty()).then_some((sharing, holders))
}

/// The holder as stored in the lease and queue hashes: a JSON array `[host, pid, user,
/// command, since_ms]`, short enough that a small lease hash keeps Redis's compact
/// encoding (values up to 64 bytes); a leader's proclamation (`elect --value`) follows
/// as a sixth element, absent for other holders.
pub(super) fn holder_json(h: &Holder) -> String {
    let (host, user, command) = (&h.host, &h.user, &h.command);
    match &h.value {
        Some(v) => serde_json::to_string(&(host, h.pid, user, command, h.acquired_at_ms, v)),
        None => serde_json::to_string(&(host, h.pid, user, command, h.acquired_at_ms)),
    }
    .unwrap_or_default()
}

/// Reads [`holder_json`] back.
pub(super) fn parse_holder(json: &str) -> Option<Holder> {
    parse_waiter(json).1
}

/// A waiter's entry in the queue's info hash: the sharing it asks for (`s|[...]` or
/// `N|[...]` in front, nothing for an exclusive waiter) and its holder.
pub(super) fn parse_waiter(json: &str) -> (Sharing, Option<Holder>) {
    match json.split_once('|') {
        Some((sharing, rest)) if !json.starts_with('[') => {
            (parse_sharing(sharing), parse_holder_json(rest))
        }
        _ => (Sharing::Exclusive, parse_holder_json(json)),
    }
}

fn parse_holder_json(json: &str) -> Option<Holder> {
    type Five = (String, u32, String, String, u64);
    type Six = (String, u32, String, String, u64, String);
    let ((host, pid, user, command, acquired_at_ms), value) =
        match serde_json::from_str::<Six>(json) {
            Ok((h, p, u, c, a, v)) => ((h, p, u, c, a), Some(v)),
            Err(_) => (serde_json::from_str::<Five>(json).ok()?, None),
        };
    Some(Holder {
        host,
        pid,
        user,
        command,
        acquired_at_ms,
        held_until_ms: None,
        value,
    })
}

/// Reads what `lease::sharing_arg` wrote back (a group's mode, a conflict's reply).
pub(super) fn parse_sharing(s: &str) -> Sharing {
    match s {
        "s" => Sharing::Shared,
        n => n
            .parse()
            .ok()
            .and_then(Sharing::limit)
            .unwrap_or(Sharing::Exclusive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_info_reads_fields() {
        let f = |s: &str| Some(s.to_string());
        let holder = &holder_json(&Holder {
            host: "h".into(),
            pid: 42,
            user: "u".into(),
            command: "sleep 1".into(),
            acquired_at_ms: 5,
            held_until_ms: None,
            value: Some("primary".into()),
        });
        let fields = vec![f("o1"), f("7"), f("2"), f(holder), f("1000"), f("2000")];
        let info = lock_info("k", fields, 500).unwrap();
        assert_eq!(info.owner, "o1");
        assert_eq!(info.fencing_token, 7);
        assert_eq!(info.depth, 2);
        assert_eq!(info.holder.pid, 42);
        assert_eq!(info.holder.value.as_deref(), Some("primary"));
        assert_eq!(info.ttl_left_ms, Some(500));
        assert_eq!(
            info.describe(),
            "o1 (h pid 42: sleep 1, finished, held until 00:00:02 UTC by --hold-at-least)"
        );
        assert_eq!(info.holder.acquired_at_ms, 1000);
        assert_eq!(info.holder.held_until_ms, Some(2000));
        assert!(lock_info("k", vec![None; 6], -2).is_none());
    }

    #[test]
    fn group_holders_are_read_in_grant_order_and_the_dead_left_out() {
        let h = holder_json(&Holder {
            host: "h".into(),
            pid: 7,
            ..Holder::default()
        });
        let entries: HashMap<String, String> = [
            ("=", "3".to_string()),
            ("b", format!("12|1|1000||{h}")),
            ("a", format!("15|2|1001|5000|{h}")),
            ("dead", format!("9|1|1000||{h}")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let ends = vec![
            ("dead".to_string(), 900.0),
            ("a".to_string(), 3000.0),
            ("b".to_string(), 4000.0),
        ];
        let (sharing, holders) = group_holders("k", entries, ends, 1000.0).unwrap();
        assert_eq!(sharing, Sharing::Limit(3));
        let owners: Vec<_> = holders.iter().map(|h| h.owner.as_str()).collect();
        assert_eq!(owners, ["b", "a"]);
        assert_eq!(holders[1].depth, 2);
        assert_eq!(holders[1].holder.held_until_ms, Some(5000));
        assert_eq!(holders[0].holder.held_until_ms, None);
        assert_eq!(holders[0].ttl_left_ms, Some(3000));
        assert_eq!(holders[0].holder.pid, 7);
    }

    #[test]
    fn a_waiter_is_read_with_the_sharing_it_asks_for() {
        let h = holder_json(&Holder {
            pid: 9,
            ..Holder::default()
        });
        assert_eq!(parse_holder(&format!("s|{h}")).unwrap().pid, 9);
        assert_eq!(parse_holder(&format!("4|{h}")).unwrap().pid, 9);
        assert_eq!(parse_holder(&h).unwrap().pid, 9);
        let asks = |json: &str| parse_waiter(json).0;
        assert_eq!(asks(&format!("s|{h}")), Sharing::Shared);
        assert_eq!(asks(&format!("4|{h}")), Sharing::Limit(4));
        assert_eq!(asks(&h), Sharing::Exclusive);
    }
}
