//! Shared holders (`--shared`) and semaphores (`--limit N`) in the key's one row, with no
//! schema change: the row names the owner
//! [`GROUP_OWNER`](crate::backend::group::GROUP_OWNER), keeps the [`Group`] as JSON in
//! `holder`, and expires with its last member (see [`crate::backend::group`]). So the
//! exclusive statements, which match on the owner and the expiry, see the key held and
//! never touch a group: renew, hold-at-least and release come here only when they found
//! no exclusive lease of the caller's.
//!
//! Every change to a group happens in a transaction that locks the key's row first, as an
//! exclusive attempt does, and reads the server's clock, on which members end. Tokens come
//! from the row's one counter, so they keep increasing across exclusive and shared grants.
//! A waiter's row in the queue keeps the sharing it asks for in its holder JSON
//! ([`Queued`]): admission counts the waiters ahead as if admitted (first come, first
//! served, see [`crate::backend::sharing`]).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, TxOpts};

use super::row::{lock_row, read_queue, supersede, Current, Freed, MyResult, MyWaiter, Queue};
use super::schema::Sql;
use crate::backend::group::{Group, Queued};
use crate::backend::sql::{
    holder_json, info, ms, Change, Changed, Decision, GroupAttempt, GroupRow, MemberChange, Outcome,
};
use crate::backend::store::Busy;
use crate::backend::{now_ms, AcquireRequest, Holder, Sharing};

/// What an attempt's transaction decided.
// Returned once per attempt and consumed at once: boxing the large variant would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Decided {
    Done(Outcome),
    /// Refused: what blocks the caller, and the ids of the older superseding waiters that
    /// gave way to it (to be woken now that the attempt has committed).
    Waits(Busy, Vec<String>),
    /// The key is held in a way the caller must not join nor wait for (exit 2).
    Conflict(Sharing),
    /// A newer `--supersede` waiter took the caller's place: its holder JSON.
    Superseded(String),
}

/// One attempt's request and place in line.
pub(super) struct Attempting<'a> {
    pub(super) req: &'a AcquireRequest,
    pub(super) w: &'a MyWaiter,
    pub(super) enqueue: bool,
    pub(super) liveness: Duration,
}

/// The longest group JSON a new member may make: the `holder` column is a TEXT (64 KiB),
/// which a server not in strict mode would truncate silently, and the margin leaves room
/// for the members' later changes (depths, `--hold-at-least` marks).
const ROW_ROOM: usize = 60_000;

/// A group attempt's statements, in the attempt's transaction (the key's row locked).
struct Joining<'a, 't> {
    tx: &'a mut Transaction<'t>,
    sql: &'a Sql,
    how: &'a Attempting<'a>,
    current: &'a Current,
    /// The queue, once read.
    queue: Option<Queue>,
}

impl Joining<'_, '_> {
    /// Takes the caller out of the line when it has a row there (not known before the
    /// queue is read: then it is taken out anyway).
    async fn dequeue(&mut self, key: &str) -> MyResult<()> {
        if self.queue.as_ref().is_none_or(|q| q.queued) {
            let (sql, id) = (self.sql.dequeue.as_str(), &self.how.w.id);
            self.tx.exec_drop(sql, (key, id)).await?;
        }
        Ok(())
    }
}

impl GroupAttempt for Joining<'_, '_> {
    type Error = mysql_async::Error;
    type Refusal = Decided;

    async fn ahead(&mut self, req: &AcquireRequest) -> MyResult<Vec<Sharing>> {
        let queue = match req.fair {
            true => read_queue(self.tx, self.sql, &req.key, self.how.w, true).await?,
            false => Queue::default(),
        };
        let ahead = queue.ahead.clone();
        self.queue = Some(queue);
        Ok(ahead)
    }

    async fn put_member(
        &mut self,
        req: &AcquireRequest,
        token: i64,
        group: &Group,
        _again: bool,
    ) -> MyResult<i64> {
        put_group(self.tx, self.sql, &req.key, token, group).await?;
        self.dequeue(&req.key).await?;
        Ok(token)
    }

    async fn grant_exclusive(&mut self, req: &AcquireRequest, row: &GroupRow) -> MyResult<Outcome> {
        let json = holder_json(&req.holder);
        let params = (&req.owner, ms(req.ttl), json, req.key.as_str());
        self.tx.exec_drop(self.sql.grant.as_str(), params).await?;
        self.dequeue(&req.key).await?;
        Ok(Outcome::Granted {
            owner: req.owner.clone(),
            token: row.token + 1,
            reentered: false,
        })
    }

    async fn refuse(&mut self, _req: &AcquireRequest, row: &GroupRow) -> MyResult<Decided> {
        let at = Refusal {
            current: self.current,
            group: row.group.as_ref(),
            now: row.now_ms,
        };
        let queue = self.queue.get_or_insert_with(Queue::default);
        refuse(self.tx, self.sql, self.how, &at, queue).await
    }

    async fn leave_line(&mut self, req: &AcquireRequest) -> MyResult<()> {
        self.dequeue(&req.key).await
    }

    fn room(&self, group: &Group) -> bool {
        group.encode().len() <= ROW_ROOM
    }
}

/// The attempt of a shared or semaphore caller, or of an exclusive one that found a
/// group: `tx` has locked the key's row, read as `current`.
pub(super) async fn attempt_shared(
    mut tx: Transaction<'_>,
    sql: &Sql,
    how: &Attempting<'_>,
    current: Current,
) -> MyResult<Decided> {
    let now = server_now(&mut tx, sql).await?;
    let row = group_row(&current, now);
    let mut joining = Joining {
        tx: &mut tx,
        sql,
        how,
        current: &current,
        queue: None,
    };
    let decided = match joining.attempt(how.req, row).await? {
        Decision::Granted(outcome) => Decided::Done(outcome),
        Decision::Refused(waits) => waits,
        Decision::Conflict(held) => Decided::Conflict(held),
    };
    tx.commit().await?;
    Ok(decided)
}

/// What a refused shared or semaphore attempt found: the key's row, its live group, the
/// server's clock.
struct Refusal<'a> {
    current: &'a Current,
    group: Option<&'a Group>,
    now: i64,
}

/// A refusal: joins the queue (or stays in it) when asked, making the older superseding
/// waiter give way, and says what blocks us.
async fn refuse(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    how: &Attempting<'_>,
    at: &Refusal<'_>,
    queue: &mut Queue,
) -> MyResult<Decided> {
    let (req, current, group, now) = (how.req, at.current, at.group, at.now);
    let queued = queue.ids.contains(&how.w.id);
    let mut gave_way = Vec::new();
    if req.fair && how.enqueue {
        let json = Queued {
            sharing: req.sharing,
            holder: Holder {
                acquired_at_ms: now_ms(),
                ..req.holder.clone()
            },
        }
        .encode();
        let alive = ms(how.liveness);
        let (priority, superseding) = (req.queue.priority, req.queue.supersede);
        let params = (
            req.key.as_str(),
            &how.w.id,
            alive,
            json,
            priority,
            superseding,
            alive,
        );
        tx.exec_drop(sql.enqueue.as_str(), params).await?;
        if superseding {
            gave_way = supersede(tx, sql, &req.key, how.w, &req.holder, queue).await?;
        }
    }
    let joined = req.fair && how.enqueue && !queued;
    let position = (queued || joined).then(|| queue.place_of(how.w));
    let waiters = queue.ids.len() + usize::from(joined);
    // The holder that may leave first stands for them all: look again when it may.
    let first_out = group.and_then(|g| {
        let infos = g.infos(&req.key, now);
        infos.into_iter().min_by_key(|m| m.ttl_left_ms)
    });
    let (holder, retry) = match first_out {
        Some(m) => {
            let left = m.ttl_left_ms.unwrap_or(0) as i64;
            (Some(m), left)
        }
        None if current.live() => {
            let owner = current.owner.as_deref().unwrap_or_default();
            let holder = current.holder.as_deref();
            let left = current.left_ms;
            let lock = info(&req.key, owner, current.token, current.depth, holder, left);
            (Some(lock), left)
        }
        // Free but promised to the waiters ahead: if the head is dead, look at its deadline.
        None => (None, queue.head_left_ms),
    };
    let busy = Busy {
        holder,
        position: position.map(|p| p as u64 + 1),
        waiters: req.fair.then_some(waiters as u64),
        retry: Some(Duration::from_millis(retry.max(0) as u64 + 1)),
    };
    Ok(Decided::Waits(busy, gave_way))
}

/// The server's clock, ms since the epoch.
async fn server_now(tx: &mut Transaction<'_>, sql: &Sql) -> MyResult<i64> {
    let now: Option<i64> = tx.exec_first(sql.now.as_str(), ()).await?;
    Ok(now.unwrap_or_default())
}

/// The group `current`'s row keeps, its ended members dropped; `None` for an exclusive
/// lease, a free key, or a group whose members have all ended.
fn live_group(current: &Current, now: i64) -> Option<Group> {
    let group = Group::read(current.owner.as_deref(), current.holder.as_deref());
    group.filter(|_| current.live())?.alive(now)
}

/// `current`'s row as the shared steps read it: a live row that keeps no live group
/// counts as an exclusive holder.
fn group_row(current: &Current, now: i64) -> GroupRow {
    let group = live_group(current, now);
    GroupRow {
        token: current.token,
        now_ms: now,
        exclusive: group.is_none() && current.live(),
        group,
    }
}

/// Writes `group` to the key's row (locked by `tx`), which expires with its last member.
async fn put_group(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    key: &str,
    token: i64,
    group: &Group,
) -> MyResult<()> {
    let params = (token, group.until_ms(), group.encode(), key);
    tx.exec_drop(sql.put_group.as_str(), params).await
}

/// A member's change's one write, in its transaction.
struct Changing<'a, 't> {
    tx: &'a mut Transaction<'t>,
    sql: &'a Sql,
}

impl MemberChange for Changing<'_, '_> {
    type Error = mysql_async::Error;

    // MySQL tells no waiter: they look again on their schedule, or on the named lock of
    // the one ahead (see `wait.rs`), so `freed` changes nothing here.
    async fn put(
        &mut self,
        key: &str,
        token: i64,
        group: Option<&Group>,
        _freed: bool,
    ) -> MyResult<()> {
        match group {
            Some(group) => put_group(self.tx, self.sql, key, token, group).await,
            None => self.tx.exec_drop(self.sql.free.as_str(), (key,)).await,
        }
    }
}

/// Runs `change` on the live group of `key` with the server's time, in a transaction
/// that locks the row; commits only what changed.
async fn change_member(
    conn: &mut Conn,
    sql: &Sql,
    key: &str,
    owner: &str,
    change: Change,
) -> MyResult<Option<Changed>> {
    let mut tx = conn.start_transaction(TxOpts::default()).await?;
    let current = lock_row(&mut tx, sql, key).await?;
    let now = server_now(&mut tx, sql).await?;
    let row = Some(group_row(&current, now));
    let mut changing = Changing { tx: &mut tx, sql };
    let changed = changing.change(key, row, owner, change).await?;
    match changed {
        None | Some(Changed::Gone) => tx.rollback().await?,
        Some(_) => tx.commit().await?,
    }
    Ok(changed)
}

/// Extends `owner`'s membership of `key`'s group to `ttl` from now (never shortens it,
/// like an exclusive renewal): its token and the milliseconds left, `None` when it is no
/// member.
pub(super) async fn renew_member(
    conn: &mut Conn,
    sql: &Sql,
    key: &str,
    owner: &str,
    ttl: Duration,
) -> MyResult<Option<(i64, i64)>> {
    match change_member(conn, sql, key, owner, Change::Renew(ttl)).await? {
        Some(Changed::Lease(token, left_ms)) => Ok(Some((token, left_ms))),
        _ => Ok(None),
    }
}

/// Leaves `owner`'s membership to end `left` from now, marked as a finished run's until
/// `until` (client clock, as `status` shows it): 1 when done, 0 when it is no member.
pub(super) async fn linger_member(
    conn: &mut Conn,
    sql: &Sql,
    key: &str,
    owner: &str,
    left: Duration,
    until: i64,
) -> MyResult<u64> {
    let change = Change::Linger(left, until.max(0) as u64);
    let done = change_member(conn, sql, key, owner, change).await?;
    Ok(u64::from(matches!(done, Some(Changed::Lease(..)))))
}

/// Releases `owner`'s membership of the group `current` keeps (in `tx`, the row locked):
/// one level when `one_level`; the last member out frees the key.
pub(super) async fn release_member(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    key: &str,
    owner: &str,
    one_level: bool,
    current: &Current,
) -> MyResult<Freed> {
    let now = server_now(tx, sql).await?;
    let row = Some(group_row(current, now));
    let mut changing = Changing { tx, sql };
    let change = Change::Release(one_level);
    Ok(match changing.change(key, row, owner, change).await? {
        None => Freed::Refused(false),
        Some(Changed::Released(released)) => Freed::Done(released),
        // Not a member (a release changes no lease).
        Some(Changed::Gone | Changed::Lease(..)) => Freed::Refused(true),
    })
}

/// The first live member of the group `current` keeps (what `unlock --force` names).
pub(super) async fn first_member(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    current: &Current,
) -> MyResult<Option<String>> {
    let now = server_now(tx, sql).await?;
    let group = live_group(current, now);
    Ok(group.and_then(|g| g.members.into_iter().next().map(|m| m.owner)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::group::{member, GROUP_OWNER};

    fn readers() -> Group {
        let mut g = Group::new(Sharing::Shared, member("a", 4, 1_000));
        g.join(member("b", 5, 2_000));
        g
    }

    fn row(owner: &str, holder: Option<String>, left_ms: i64) -> Current {
        Current::read((Some(owner.into()), 5, 1, holder, left_ms))
    }

    #[test]
    fn a_group_row_is_read_live_and_an_exclusive_one_never() {
        let json = Some(readers().encode());
        let live = live_group(&row(GROUP_OWNER, json.clone(), 100), 1_500);
        assert_eq!(live.map(|g| g.members.len()), Some(1), "a ended at 1000");
        assert!(live_group(&row(GROUP_OWNER, json.clone(), 100), 2_000).is_none());
        assert!(live_group(&row(GROUP_OWNER, json.clone(), 0), 0).is_none());
        assert!(live_group(&row("0123abcd", json, 100), 0).is_none());
    }

    #[test]
    fn a_live_row_whose_members_all_ended_counts_as_an_exclusive_holder() {
        let json = Some(readers().encode());
        let r = group_row(&row(GROUP_OWNER, json.clone(), 100), 1_500);
        assert_eq!((r.group.is_some(), r.exclusive), (true, false));
        let r = group_row(&row(GROUP_OWNER, json, 100), 2_000);
        assert_eq!((r.group.is_some(), r.exclusive), (false, true));
    }
}
