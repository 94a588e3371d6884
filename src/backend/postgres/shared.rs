//! Shared holders (`--shared`) and semaphores (`--limit N`) in the key's one row, with no
//! column of their own: the row names [`GROUP_OWNER`] and keeps the [`Group`] as its holder
//! JSON, its expiry the last member's end (see `backend/group.rs`). The exclusive path
//! reads only owner and expiry, so it sees such a key held and pays nothing for groups.
//!
//! Every change to a group is a transaction that locks the key's row first, as an
//! exclusive attempt does, and reads the server's clock, on which the members' ends are
//! kept. Renewing or releasing a member comes here only after the one-statement exclusive
//! path matched no owner. Tokens come from the row's one counter, so they only grow,
//! whoever holds the key. The steps are `backend/sql/shared.rs`'s; this file supplies
//! PostgreSQL's statements (one statement writes the group, dequeues and notifies).

use tokio_postgres::{Client, Row, Transaction};

use super::row::{grant, leave_in, refused, Ask, Blocked, Current, PgResult, Queue};
use super::schema::{payload, Prepared};
use crate::backend::group::{Group, Queued, GROUP_OWNER};
use crate::backend::sql::{
    info, ms, Change, Changed, Decision, GroupAttempt, GroupRow, MemberChange, Outcome,
};
use crate::backend::store::Busy;
use crate::backend::{AcquireRequest, Sharing};

/// What an attempt decided: an outcome, or a key held in a way this caller must not join
/// nor wait for (exit 2).
// Built once per attempt and moved up a call or two: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Step {
    Done(Outcome),
    Conflict(Sharing),
    /// A newer `--supersede` waiter took our place: its holder JSON.
    Superseded(String),
}

/// The key's row locked, as a group sees it.
struct Locked {
    current: Current,
    /// The server's now, in ms since the epoch.
    now_ms: i64,
    /// The live members, when the row keeps a group.
    group: Option<Group>,
}

impl Locked {
    fn read(row: &Row) -> Locked {
        let current = Current::read(row);
        let now_ms: i64 = row.get(6);
        let group = match current.live {
            true => Group::read(current.owner.as_deref(), current.holder.as_deref()),
            false => None,
        };
        Locked {
            group: group.and_then(|g| g.alive(now_ms)),
            current,
            now_ms,
        }
    }

    /// The owner of a live exclusive lease.
    fn exclusive(&self) -> Option<&String> {
        let c = &self.current;
        c.owner.as_ref().filter(|o| c.live && *o != GROUP_OWNER)
    }

    /// The row as the shared steps read it.
    fn row(&self) -> GroupRow {
        GroupRow {
            token: self.current.token,
            now_ms: self.now_ms,
            group: self.group.clone(),
            exclusive: self.exclusive().is_some(),
        }
    }
}

/// Locks the key's row (`create`: made if missing) and reads it.
async fn lock(
    tx: &Transaction<'_>,
    st: &Prepared,
    key: &str,
    create: bool,
) -> PgResult<Option<Locked>> {
    loop {
        match tx.query_opt(&st.group_row, &[&key]).await? {
            Some(row) => return Ok(Some(Locked::read(&row))),
            None if create => tx.execute(&st.insert_row, &[&key]).await?,
            None => return Ok(None),
        };
    }
}

/// What one write of a group's row changes.
struct Write<'a> {
    key: &'a str,
    /// `None` frees the row.
    group: Option<&'a Group>,
    token: i64,
    /// A waiter admitted, dequeued.
    waiter: Option<&'a str>,
    /// `R` (waiters look again) or `T` (watchers only), or nobody told.
    note: Option<char>,
}

async fn write(tx: &Transaction<'_>, st: &Prepared, channel: &str, w: Write<'_>) -> PgResult<i64> {
    let owner = w.group.map(|_| GROUP_OWNER);
    let until = w.group.map_or(0, Group::until_ms);
    let json = w.group.map(Group::encode);
    let note = w.note.map(|kind| payload(kind, w.key));
    let args: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
        &w.key, &owner, &w.token, &until, &json, &w.waiter, &channel, &note,
    ];
    let row = tx.query_one(&st.group_write, &args).await?;
    Ok(row.get(0))
}

/// A group attempt's statements, in the attempt's transaction.
struct Attempting<'a> {
    tx: &'a Transaction<'a>,
    ask: &'a Ask<'a>,
    locked: Locked,
    queue: Queue,
    /// The sharing of the waiters ahead of the caller.
    ahead: Vec<Sharing>,
    /// Whether others wait: an admission wakes the next (else only watchers are told).
    others: bool,
}

impl GroupAttempt for Attempting<'_> {
    type Error = tokio_postgres::Error;
    type Refusal = Busy;

    async fn ahead(&mut self, _req: &AcquireRequest) -> PgResult<Vec<Sharing>> {
        // Read with the queue before the exclusive holder's re-entry was looked at.
        Ok(std::mem::take(&mut self.ahead))
    }

    async fn put_member(
        &mut self,
        req: &AcquireRequest,
        token: i64,
        group: &Group,
        again: bool,
    ) -> PgResult<i64> {
        let note = match (again, self.others) {
            (true, _) => None,
            (false, true) => Some('R'),
            (false, false) => Some('T'),
        };
        let put = Write {
            key: &req.key,
            group: Some(group),
            token,
            waiter: Some(&self.ask.w.id),
            note,
        };
        write(self.tx, self.ask.st, &self.ask.names.channel, put).await
    }

    async fn grant_exclusive(
        &mut self,
        _req: &AcquireRequest,
        _row: &GroupRow,
    ) -> PgResult<Outcome> {
        grant(self.tx, self.ask).await
    }

    async fn refuse(&mut self, req: &AcquireRequest, _row: &GroupRow) -> PgResult<Busy> {
        let blocked = blocked(&req.key, &self.locked, &self.queue);
        refused(self.tx, self.ask, &self.queue, blocked).await
    }

    async fn leave_line(&mut self, req: &AcquireRequest) -> PgResult<()> {
        let (st, names, w) = (self.ask.st, self.ask.names, self.ask.w);
        leave_in(self.tx, st, names, &req.key, &w.id, &req.owner).await
    }
}

/// One attempt of a shared or semaphore caller (or of an exclusive one on a key held by a
/// group), in `tx`, which the caller commits.
pub(super) async fn attempt(tx: &Transaction<'_>, ask: &Ask<'_>) -> PgResult<Step> {
    let (st, req) = (ask.st, ask.req);
    let key = &req.key;
    let locked = lock(tx, st, key, true).await?.expect("created");
    let queue = match req.fair {
        true => Some(tx.query_one(&st.queue_sharing, &[key]).await?),
        false => None,
    };
    let ids: Vec<String> = queue.as_ref().map_or_else(Vec::new, |q| q.get(1));
    let ahead = queue.as_ref().map_or_else(Vec::new, |q| {
        ahead(&ids, &q.get::<_, Vec<String>>(3), &ask.w.id)
    });
    let others = ids.iter().any(|id| *id != ask.w.id);
    let queue = queue
        .map(|q| Queue {
            pruned: q.get(0),
            head: ids.first().cloned(),
            head_left_ms: q.get(2),
        })
        .unwrap_or_default();
    if let Some(owner) = locked
        .exclusive()
        .filter(|o| **o == req.owner || req.reenter.contains(o))
    {
        // A nested run of the exclusive holder (or our own lost grant): the lease is extended.
        let deeper = *owner != req.owner;
        let row = tx
            .query_one(&st.extend, &[key, &ms(req.ttl), &ask.w.id, &deeper])
            .await?;
        return Ok(Step::Done(Outcome::Granted {
            owner: owner.clone(),
            token: row.get(0),
            reentered: deeper,
        }));
    }
    let row = locked.row();
    let mut attempting = Attempting {
        tx,
        ask,
        locked,
        queue,
        ahead,
        others,
    };
    Ok(match attempting.attempt(req, row).await? {
        Decision::Granted(outcome) => Step::Done(outcome),
        Decision::Refused(busy) => Step::Done(Outcome::Busy(busy)),
        Decision::Conflict(held) => Step::Conflict(held),
    })
}

/// The sharing of the live waiters queued before `waiter` (all of them when it is not
/// queued), from their ids and holders in queue order.
fn ahead(ids: &[String], holders: &[String], waiter: &str) -> Vec<Sharing> {
    let before = ids.iter().position(|id| id == waiter).unwrap_or(ids.len());
    holders
        .iter()
        .take(before)
        .map(|h| Queued::read(h).sharing)
        .collect()
}

/// What keeps a waiting caller out: the first member (or the exclusive holder), and the
/// first end that may let it in.
fn blocked(key: &str, locked: &Locked, queue: &Queue) -> Blocked {
    let c = &locked.current;
    if let Some(g) = &locked.group {
        let first_end = g.members.iter().map(|m| m.until_ms).min().unwrap_or(0);
        return Blocked {
            holder: g.infos(key, locked.now_ms).into_iter().next(),
            live: true,
            retry_ms: first_end - locked.now_ms,
        };
    }
    match locked.exclusive() {
        Some(owner) => Blocked {
            holder: Some(info(
                key,
                owner,
                c.token,
                c.depth,
                c.holder.as_deref(),
                c.left_ms,
            )),
            live: true,
            retry_ms: c.left_ms,
        },
        None => Blocked {
            holder: None,
            live: false,
            retry_ms: queue.head_left_ms,
        },
    }
}

/// A member's change's one write, in its transaction.
struct Changing<'a> {
    tx: &'a Transaction<'a>,
    st: &'a Prepared,
    channel: &'a str,
}

impl MemberChange for Changing<'_> {
    type Error = tokio_postgres::Error;

    async fn put(
        &mut self,
        key: &str,
        token: i64,
        group: Option<&Group>,
        freed: bool,
    ) -> PgResult<()> {
        // A place freed: waiters look again (and the key is free when it was the last).
        let note = freed.then_some('R');
        let put = Write {
            key,
            group,
            token,
            waiter: None,
            note,
        };
        write(self.tx, self.st, self.channel, put).await.map(drop)
    }
}

/// Changes `owner`'s membership of `key`'s group in one transaction; `None` when the key
/// keeps no group (the caller says why).
pub(super) async fn change(
    client: &mut Client,
    st: &Prepared,
    channel: &str,
    key: &str,
    owner: &str,
    change: Change,
) -> PgResult<Option<Changed>> {
    let tx = client.transaction().await?;
    let row = lock(&tx, st, key, false).await?.map(|l| l.row());
    let mut changing = Changing {
        tx: &tx,
        st,
        channel,
    };
    let changed = changing.change(key, row, owner, change).await?;
    if matches!(changed, None | Some(Changed::Gone)) {
        return Ok(changed);
    }
    tx.commit().await?;
    Ok(changed)
}

/// The owners of a group's members, first granted first.
pub(super) fn members(group: &Group) -> String {
    let owners: Vec<&str> = group.members.iter().map(|m| m.owner.as_str()).collect();
    owners.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Holder;

    #[test]
    fn the_waiters_ahead_are_those_queued_before_us_or_all() {
        let ids = ["a", "b", "c"].map(String::from);
        let shared = Queued {
            sharing: Sharing::Shared,
            holder: Holder::default(),
        };
        let plain = serde_json::to_string(&Holder::default()).unwrap();
        let holders = [shared.encode(), plain, "?".to_string()];
        assert_eq!(ahead(&ids, &holders, "a"), vec![]);
        assert_eq!(
            ahead(&ids, &holders, "c"),
            vec![Sharing::Shared, Sharing::Exclusive]
        );
        assert_eq!(ahead(&ids, &holders, "new").len(), 3);
    }
}
