//! Shared holders (`--shared`) and semaphores (`--limit N`) in the key's one row, with no
//! column of their own: the row names [`GROUP_OWNER`] and keeps the [`Group`] as its holder
//! JSON, its expiry the last member's end (see `backend/group.rs`). The exclusive path
//! reads only owner and expiry, so it sees such a key held and pays nothing for groups.
//!
//! Every change to a group is a transaction that locks the key's row first, as an
//! exclusive attempt does, and reads the server's clock, on which the members' ends are
//! kept. Renewing or releasing a member comes here only after the one-statement exclusive
//! path matched no owner. Tokens come from the row's one counter, so they only grow,
//! whoever holds the key.

use std::time::Duration;

use tokio_postgres::{Client, Row, Transaction};

use super::backend::ms;
use super::row::{grant, leave_in, refused, Ask, Blocked, Current, PgResult, Queue};
use super::schema::{payload, Prepared};
use crate::backend::group::{Group, Member, Queued, GROUP_OWNER};
use crate::backend::sharing::Admission;
use crate::backend::sql::{holder_json, info, Outcome};
use crate::backend::{Holder, Released, Sharing};

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
    if let Some(step) = again(tx, ask, &locked).await? {
        return Ok(Step::Done(step));
    }
    let admission = match (&locked.group, locked.exclusive()) {
        (Some(g), _) => g.admit(req.sharing, &ahead),
        (None, Some(_)) => req.sharing.admit(Some(Sharing::Exclusive), 1, &ahead),
        (None, None) => req.sharing.admit(None, 0, &ahead),
    };
    match admission {
        Admission::Admit if req.sharing.is_exclusive() => Ok(Step::Done(grant(tx, ask).await?)),
        Admission::Admit => Ok(Step::Done(join(tx, ask, locked, others).await?)),
        Admission::Wait => {
            let busy = refused(tx, ask, &queue, blocked(key, &locked, &queue)).await?;
            Ok(Step::Done(Outcome::Busy(busy)))
        }
        Admission::Conflict(held) => {
            // Never to be admitted: out of the line at once.
            leave_in(tx, st, ask.names, key, &ask.w.id, &req.owner).await?;
            Ok(Step::Conflict(held))
        }
    }
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

/// A member of the group claims its grant again (its answer was lost) or, for one of
/// `reenter`, goes one level deeper.
async fn again(tx: &Transaction<'_>, ask: &Ask<'_>, locked: &Locked) -> PgResult<Option<Outcome>> {
    let Some(mut g) = locked.group.clone() else {
        return Ok(None);
    };
    let req = ask.req;
    let until = locked.now_ms + ms(req.ttl);
    let Some((owner, token, reentered)) = g.hold_again(&req.owner, &req.reenter, until) else {
        return Ok(None);
    };
    let put = Write {
        key: &req.key,
        group: Some(&g),
        token: locked.current.token,
        waiter: Some(&ask.w.id),
        note: None,
    };
    write(tx, ask.st, &ask.names.channel, put).await?;
    Ok(Some(Outcome::Granted {
        owner,
        token: token as i64,
        reentered,
    }))
}

/// Admits the caller: a new member with the row's next token, out of the line. The
/// next waiter is woken (a semaphore may have room for it, a reader may join too); with
/// none, only watchers are told.
async fn join(
    tx: &Transaction<'_>,
    ask: &Ask<'_>,
    locked: Locked,
    others: bool,
) -> PgResult<Outcome> {
    let req = ask.req;
    let token = locked.current.token + 1;
    let holder: Holder = serde_json::from_str(&holder_json(&req.holder)).unwrap_or_default();
    let member = Member {
        owner: req.owner.clone(),
        token: token as u64,
        depth: 1,
        until_ms: locked.now_ms + ms(req.ttl),
        holder,
    };
    let group = match locked.group {
        Some(mut g) => {
            g.join(member);
            g
        }
        None => Group::new(req.sharing, member),
    };
    let put = Write {
        key: &req.key,
        group: Some(&group),
        token,
        waiter: Some(&ask.w.id),
        note: Some(if others { 'R' } else { 'T' }),
    };
    let token = write(tx, ask.st, &ask.names.channel, put).await?;
    Ok(Outcome::Granted {
        owner: req.owner.clone(),
        token,
        reentered: false,
    })
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

/// What a member's renewal, hold or release does to its group.
pub(super) enum Change {
    /// The lease extended to `ttl` from now (never shortened).
    Renew(Duration),
    /// The lease left to end `left` from now, marked as held until `until_ms` (wall clock).
    Linger(Duration, u64),
    /// One level (true) or all of them.
    Release(bool),
}

/// What a change did: the member's token and ms left (renew, linger), or the release.
pub(super) enum Changed {
    Lease(i64, i64),
    Released(Released),
    /// The key is held by a group `owner` is no member of (any more): its place is gone.
    Gone,
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
    let Some(locked) = lock(&tx, st, key, false).await? else {
        return Ok(None);
    };
    let (Some(mut g), now) = (locked.group, locked.now_ms) else {
        return Ok(None);
    };
    let Some(m) = g.member(owner).cloned() else {
        return Ok(Some(Changed::Gone));
    };
    let mut note = None;
    let changed = match change {
        Change::Renew(ttl) => {
            let until = m.until_ms.max(now + ms(ttl));
            g.renew(owner, until);
            Changed::Lease(m.token as i64, until - now)
        }
        Change::Linger(left, held_until) => {
            let until = now + ms(left);
            g.renew(owner, until);
            if let Some(m) = g.members.iter_mut().find(|m| m.owner == owner) {
                m.holder.held_until_ms = Some(held_until);
            }
            Changed::Lease(m.token as i64, until - now)
        }
        Change::Release(one) => {
            let depth = g.release(owner, one).unwrap_or(0);
            if depth == 0 {
                // A place freed: waiters look again (and the key is free when it was the last).
                note = Some('R');
            }
            Changed::Released(Released {
                previous_owner: Some(owner.to_string()),
                still_held: depth > 0,
            })
        }
    };
    let put = Write {
        key,
        group: (!g.is_empty()).then_some(&g),
        token: locked.current.token,
        waiter: None,
        note,
    };
    write(&tx, st, channel, put).await?;
    tx.commit().await?;
    Ok(Some(changed))
}

/// The owners of a group's members, first granted first.
pub(super) fn members(group: &Group) -> String {
    let owners: Vec<&str> = group.members.iter().map(|m| m.owner.as_str()).collect();
    owners.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

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
