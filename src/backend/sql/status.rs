//! `status` and the last runs, put together from the rows the SQL stores read.

use super::lease::{info, live_group};
use crate::backend::group::Queued;
use crate::backend::{KeyStatus, LastRuns, WaiterInfo};

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

#[cfg(test)]
mod tests {
    use super::statuses;
    use crate::backend::group::{self, Group, Member, GROUP_OWNER};
    use crate::backend::Sharing;

    /// Owner `a`, token 1, live until `until_ms`.
    fn member(until_ms: i64) -> Member {
        group::member("a", 1, until_ms)
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
}
