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

use super::backend::ms;
use super::row::{lock_row, read_queue, supersede, Current, Freed, MyResult, MyWaiter, Queue};
use super::schema::Sql;
use crate::backend::group::{Group, Member, Queued};
use crate::backend::sharing::Admission;
use crate::backend::sql::{holder_json, info, Outcome};
use crate::backend::store::Busy;
use crate::backend::{now_ms, AcquireRequest, Holder, Released, Sharing};

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

/// The attempt of a shared or semaphore caller, or of an exclusive one that found a
/// group: `tx` has locked the key's row, read as `current`.
pub(super) async fn attempt_shared(
    mut tx: Transaction<'_>,
    sql: &Sql,
    how: &Attempting<'_>,
    current: Current,
) -> MyResult<Decided> {
    let (req, key) = (how.req, how.req.key.as_str());
    let now = server_now(&mut tx, sql).await?;
    let until = now + ms(req.ttl);
    let mut group = live_group(&current, now);
    if let Some(g) = group.as_mut() {
        if let Some(granted) = hold_again(g, req, until) {
            put_group(&mut tx, sql, key, current.token, g).await?;
            tx.exec_drop(sql.dequeue.as_str(), (key, &how.w.id)).await?;
            tx.commit().await?;
            return Ok(Decided::Done(granted));
        }
    }
    let (held, holders) = match &group {
        Some(g) => (Some(g.sharing), g.members.len() as u32),
        None if current.live() => (Some(Sharing::Exclusive), 1),
        None => (None, 0),
    };
    let mut queue = match req.fair {
        true => read_queue(&mut tx, sql, key, how.w, true).await?,
        false => Queue::default(),
    };
    match req.sharing.admit(held, holders, &queue.ahead) {
        Admission::Conflict(held) => {
            if queue.queued {
                tx.exec_drop(sql.dequeue.as_str(), (key, &how.w.id)).await?;
            }
            tx.commit().await?;
            Ok(Decided::Conflict(held))
        }
        Admission::Admit => {
            let admitted = admit(&mut tx, sql, how, &current, group.clone(), until).await?;
            if let Some(granted) = admitted {
                if queue.queued {
                    tx.exec_drop(sql.dequeue.as_str(), (key, &how.w.id)).await?;
                }
                tx.commit().await?;
                return Ok(Decided::Done(granted));
            }
            // The row has no room for one more member: wait for one to leave.
            let at = Refusal {
                current: &current,
                group: group.as_ref(),
                now,
            };
            let waits = refuse(&mut tx, sql, how, &at, &mut queue).await?;
            tx.commit().await?;
            Ok(waits)
        }
        Admission::Wait => {
            let at = Refusal {
                current: &current,
                group: group.as_ref(),
                now,
            };
            let waits = refuse(&mut tx, sql, how, &at, &mut queue).await?;
            tx.commit().await?;
            Ok(waits)
        }
    }
}

/// The longest group JSON a new member may make: the `holder` column is a TEXT (64 KiB),
/// which a server not in strict mode would truncate silently, and the margin leaves room
/// for the members' later changes (depths, `--hold-at-least` marks).
const ROW_ROOM: usize = 60_000;

/// The caller's own grant whose answer was lost (claimed again), or a re-entry of one of
/// the owners it acts for: both extend the member's lease to `until`.
fn hold_again(g: &mut Group, req: &AcquireRequest, until: i64) -> Option<Outcome> {
    let (owner, token, reentered) = g.hold_again(&req.owner, &req.reenter, until)?;
    Some(granted(&owner, token, reentered))
}

fn granted(owner: &str, token: u64, reentered: bool) -> Outcome {
    Outcome::Granted {
        owner: owner.to_string(),
        token: token as i64,
        reentered,
    }
}

/// Grants the key to the caller: a new member with the next token, or, for an exclusive
/// caller that found the group gone, an exclusive lease as usual. `None` when the row
/// has no room for one more member.
async fn admit(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    how: &Attempting<'_>,
    current: &Current,
    group: Option<Group>,
    until: i64,
) -> MyResult<Option<Outcome>> {
    let (req, key) = (how.req, how.req.key.as_str());
    let token = current.token + 1;
    if req.sharing.is_exclusive() {
        let json = holder_json(&req.holder);
        tx.exec_drop(sql.grant.as_str(), (&req.owner, ms(req.ttl), json, key))
            .await?;
        return Ok(Some(granted(&req.owner, token as u64, false)));
    }
    let member = Member {
        owner: req.owner.clone(),
        token: token as u64,
        depth: 1,
        until_ms: until,
        holder: Holder {
            acquired_at_ms: now_ms(),
            ..req.holder.clone()
        },
    };
    let group = match group {
        Some(mut g) => {
            g.join(member);
            g
        }
        None => Group::new(req.sharing, member),
    };
    if group.encode().len() > ROW_ROOM {
        return Ok(None);
    }
    put_group(tx, sql, key, token, &group).await?;
    Ok(Some(granted(&req.owner, token as u64, false)))
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

/// Runs `change` on the live group of `key` with the server's time, in a transaction
/// that locks the row; writes the group back when `change` returns something.
async fn change_group<T>(
    conn: &mut Conn,
    sql: &Sql,
    key: &str,
    change: impl FnOnce(&mut Group, i64) -> Option<T>,
) -> MyResult<Option<T>> {
    let mut tx = conn.start_transaction(TxOpts::default()).await?;
    let current = lock_row(&mut tx, sql, key).await?;
    let now = server_now(&mut tx, sql).await?;
    let changed = live_group(&current, now).and_then(|mut g| Some((change(&mut g, now)?, g)));
    let Some((done, group)) = changed else {
        tx.rollback().await?;
        return Ok(None);
    };
    put_group(&mut tx, sql, key, current.token, &group).await?;
    tx.commit().await?;
    Ok(Some(done))
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
    change_group(conn, sql, key, |g, now| {
        let until = g.member(owner)?.until_ms.max(now + ms(ttl));
        let token = g.renew(owner, until)?.token;
        Some((token as i64, until - now))
    })
    .await
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
    let done = change_group(conn, sql, key, |g, now| {
        let m = g.members.iter_mut().find(|m| m.owner == owner)?;
        m.until_ms = now + ms(left);
        m.holder.held_until_ms = Some(until.max(0) as u64);
        Some(())
    })
    .await?;
    Ok(u64::from(done.is_some()))
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
    let Some(mut group) = live_group(current, now) else {
        return Ok(Freed::Refused(false));
    };
    let Some(depth) = group.release(owner, one_level) else {
        return Ok(Freed::Refused(true));
    };
    if group.is_empty() {
        tx.exec_drop(sql.free.as_str(), (key,)).await?;
    } else {
        put_group(tx, sql, key, current.token, &group).await?;
    }
    Ok(Freed::Done(Released {
        previous_owner: Some(owner.to_string()),
        still_held: depth > 0,
    }))
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

    fn request(owner: &str, reenter: &[&str]) -> AcquireRequest {
        AcquireRequest {
            key: "k".into(),
            owner: owner.into(),
            reenter: reenter.iter().map(|o| o.to_string()).collect(),
            ttl: Duration::from_secs(1),
            holder: Holder::default(),
            detached: false,
            fair: true,
            sharing: Sharing::Shared,
            queue: Default::default(),
        }
    }

    fn grant(o: Option<Outcome>) -> Option<(String, i64, bool)> {
        match o? {
            Outcome::Granted {
                owner,
                token,
                reentered,
            } => Some((owner, token, reentered)),
            Outcome::Busy(_) => None,
        }
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
    fn a_lost_grant_is_claimed_and_a_nested_run_reenters() {
        let mut g = readers();
        let claimed = grant(hold_again(&mut g, &request("a", &[]), 1_500));
        assert_eq!(claimed, Some(("a".into(), 4, false)));
        assert_eq!(
            g.member("a").map(|m| (m.depth, m.until_ms)),
            Some((1, 1_500))
        );
        let nested = grant(hold_again(&mut g, &request("new", &["x", "b"]), 900));
        assert_eq!(nested, Some(("b".into(), 5, true)));
        assert_eq!(
            g.member("b").map(|m| (m.depth, m.until_ms)),
            Some((2, 2_000))
        );
        assert!(hold_again(&mut g, &request("new", &["x"]), 900).is_none());
    }
}
