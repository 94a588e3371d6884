//! One acquire attempt (a short transaction), renew and release (one statement each), and
//! leaving the queue.
//!
//! An attempt locks the key's row first (`FOR UPDATE`, the row created on first use) and
//! only then reads the queue: in READ COMMITTED every statement sees what was committed
//! before it started, so the queue it reads is the one every other acquirer of the key
//! left behind. The row lock is held until the attempt commits.
//!
//! Where shared or semaphore holders are involved (the caller asks for them, or the row
//! keeps a group) the attempt is `shared.rs`'s; a renew or release that matched no
//! exclusive owner asks `shared.rs` whether the owner is a group's member.

use std::time::{Duration, Instant};

use tokio_postgres::{Row, Transaction};

use super::backend::{Conn, PostgresStore};
use super::row::{
    grant, leave_in, read_queue, refused, Ask, Blocked, Current, PgResult, PgWaiter, Queue,
};
use super::schema::{payload, Names};
use super::shared::{self, Step};
use crate::backend::group::GROUP_OWNER;
use crate::backend::sql::{self, info, live_group, ms, renewed, Change, Changed, Outcome};
use crate::backend::store::Attempt;
use crate::backend::{now_ms, AcquireRequest, Lease, ReleaseMode, Released};
use crate::error::{Error, Result};

/// How many times an attempt the server rolled back as [`transient`] runs again.
const TRANSIENT_RETRIES: u32 = 3;

/// A transaction the server rolled back to break a deadlock (a waiter leaving locks its
/// queue row before the key's, an attempt the other way round) or a serialization
/// conflict (see [`sql::rolled_back`]).
fn transient(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| sql::rolled_back(c.code()))
}

impl PostgresStore {
    /// One attempt: take, re-enter or claim the key, or be refused (and queue).
    pub(super) async fn attempt_as(
        &self,
        req: &AcquireRequest,
        w: &PgWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        let sent_at = Instant::now();
        let mut guard = self.conn().await?;
        let conn = guard.as_mut().expect("opened by conn()");
        let tuning = self.server.tuning;
        let attempt = async {
            let mut again = TRANSIENT_RETRIES;
            loop {
                let ask = Ask {
                    st: &conn.st,
                    names: &self.names,
                    req,
                    w,
                    enqueue,
                    liveness: tuning.liveness,
                };
                match attempt_tx(&mut conn.client, &ask).await {
                    Err(e) if again > 0 && transient(&e) => again -= 1,
                    done => return done,
                }
            }
        };
        let step = self.server.within("cannot acquire", attempt).await;
        if step.is_err() {
            *guard = None;
        }
        match step? {
            Step::Done(outcome) => Ok(outcome.attempt(req, sent_at)),
            Step::Conflict(held) => {
                let name = &self.server.target.name;
                Err(req.sharing.conflict(&req.key, name, held))
            }
            Step::Superseded(by) => {
                let by = sql::holder_of(Some(&by));
                let name = &self.server.target.name;
                Err(Error::superseded(&req.key, name, &by.host, by.pid))
            }
        }
    }

    /// Extends `owner`'s lease: one statement.
    pub(super) async fn renew_lease(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.no_group_owner("renew", key, owner)?;
        let sent_at = Instant::now();
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let row = self
            .server
            .within(
                "cannot renew",
                c.client.query_opt(&c.st.renew, &[&key, &owner, &ms(ttl)]),
            )
            .await;
        let row = match row {
            Ok(row) => row,
            Err(e) => {
                *guard = None;
                return Err(e);
            }
        };
        let left = match row {
            Some(row) => (row.get(0), row.get(1)),
            None => match self.member(c, key, owner, Change::Renew(ttl)).await {
                Ok(Some(Changed::Lease(token, left))) => (token, left),
                Ok(Some(_)) => return Err(self.gone("renew", key)),
                Ok(None) => return Err(self.refusal(c, "renew", key, owner).await),
                Err(e) => {
                    *guard = None;
                    return Err(e);
                }
            },
        };
        Ok(renewed(key, owner, ttl, sent_at, left))
    }

    /// Leaves `owner`'s lease to expire `left` from now, marked as a finished run's
    /// (`exec --hold-at-least`): one statement.
    pub(super) async fn linger_lease(&self, key: &str, owner: &str, left: Duration) -> Result<()> {
        self.no_group_owner("hold", key, owner)?;
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let until = (now_ms() + left.as_millis() as u64) as i64;
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&key, &owner, &ms(left), &until];
        let request = c.client.query_opt(&c.st.linger, &args);
        let held = match self.server.within("cannot leave held", request).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {
                let change = Change::Linger(left, until as u64);
                self.member(c, key, owner, change).await
            }
            Err(e) => Err(e),
        };
        match held {
            Ok(Some(Changed::Gone)) => Err(self.gone("hold", key)),
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(self.refusal(c, "hold", key, owner).await),
            Err(e) => {
                *guard = None;
                Err(e)
            }
        }
    }

    /// Releases as `mode` says: one statement, or a short transaction for `Force`.
    pub(super) async fn release_lease(
        &self,
        key: &str,
        owner: &str,
        mode: ReleaseMode,
    ) -> Result<Released> {
        if mode != ReleaseMode::Force {
            self.no_group_owner("release", key, owner)?;
        }
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let released = match mode {
            ReleaseMode::Force => {
                let force = force_tx(c, &self.names, key);
                self.server.within("cannot release", force).await
            }
            _ => {
                let one = mode == ReleaseMode::One;
                let request = release_waking(c, &self.names, key, owner, one);
                match self.server.within("cannot release", request).await {
                    Ok(Some(row)) => Ok(Released {
                        previous_owner: Some(owner.to_string()),
                        still_held: row.get::<_, i32>(0) > 0,
                    }),
                    Ok(None) => match self.member(c, key, owner, Change::Release(one)).await {
                        Ok(Some(Changed::Released(released))) => Ok(released),
                        Ok(Some(_)) => return Err(self.gone("release", key)),
                        Ok(None) => return Err(self.refusal(c, "release", key, owner).await),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                }
            }
        };
        if released.is_err() {
            *guard = None;
        }
        released
    }

    /// Changes `owner`'s place among the shared or semaphore holders of `key`: what the
    /// one-statement exclusive paths fall back to when they matched no owner.
    pub(super) async fn member(
        &self,
        c: &mut Conn,
        key: &str,
        owner: &str,
        what: Change,
    ) -> Result<Option<Changed>> {
        let (st, channel) = (&c.st, &self.names.channel);
        let request = shared::change(&mut c.client, st, channel, key, owner, what);
        self.server
            .within("cannot change the holders", request)
            .await
    }

    /// Takes `owner` out of `key`'s group, if it is a member: what leaving does for a
    /// shared or semaphore caller whose grant may have been lost.
    pub(super) async fn leave_group(&self, key: &str, owner: &str) -> Result<()> {
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let left = self.member(c, key, owner, Change::Release(false)).await;
        if left.is_err() {
            *guard = None;
        }
        left.map(drop)
    }

    /// Refuses the owner name a group's row carries (no acquisition has it: owner ids are
    /// hex digits): the one-statement paths, which match on the owner, would otherwise
    /// renew or free every member at once.
    fn no_group_owner(&self, verb: &str, key: &str, owner: &str) -> Result<()> {
        match owner == GROUP_OWNER {
            true => Err(self.gone(verb, key)),
            false => Ok(()),
        }
    }

    /// A member's place among a key's holders is gone (expired or released).
    fn gone(&self, verb: &str, key: &str) -> Error {
        Error::lease_gone(verb, key, &self.server.target.name)
    }

    /// Why `owner` may not renew or release `key`: held by another, or gone.
    async fn refusal(&self, c: &Conn, verb: &str, key: &str, owner: &str) -> Error {
        let live = self
            .server
            .within(
                "cannot read the lease",
                c.client.query_opt(&c.st.why, &[&key]),
            )
            .await;
        let name = &self.server.target.name;
        match live {
            Ok(Some(row)) if row.get::<_, Option<bool>>(0) == Some(true) => {
                Error::held_by_other(verb, key, name, owner)
            }
            Ok(_) => Error::lease_gone(verb, key, name),
            Err(e) => e,
        }
    }

    /// Leaves the queue; a grant to `owner` whose answer never arrived goes too; and the
    /// key's waiters look again (the new head must not sleep through its turn).
    pub(super) async fn leave_queue(&self, key: &str, waiter: &str, owner: &str) -> Result<()> {
        let mut guard = self.conn().await?;
        let c = guard.as_mut().expect("opened by conn()");
        let leaving = leave_tx(c, &self.names, key, waiter, owner);
        let left = self.server.within("cannot leave the queue", leaving).await;
        if left.is_err() {
            *guard = None;
        }
        left.map(drop)
    }
}

/// An exclusive release, and the key's head woken when that freed it: the wake is
/// pipelined behind the `UPDATE`, so it runs after the row lock was taken and sees every
/// waiter queued before.
async fn release_waking(
    c: &Conn,
    names: &Names,
    key: &str,
    owner: &str,
    one: bool,
) -> PgResult<Option<Row>> {
    let note = payload('R', key);
    let release: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&key, &owner, &one];
    let wake: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&key, &names.channel, &note];
    let (released, woken) = tokio::join!(
        c.client.query_opt(&c.st.release, &release),
        c.client.query(&c.st.wake_free, &wake)
    );
    woken?;
    released
}

/// Leaves the queue, the key's row locked first so that the head woken next is the one
/// every attempt before us left behind.
async fn leave_tx(
    c: &mut Conn,
    names: &Names,
    key: &str,
    waiter: &str,
    owner: &str,
) -> PgResult<()> {
    let st = &c.st;
    let tx = c.client.transaction().await?;
    tx.query_opt(&st.lock_row, &[&key]).await?;
    leave_in(&tx, st, names, key, waiter, owner).await?;
    tx.commit().await
}

/// The attempt's transaction: an exclusive one here, a shared or semaphore one (or an
/// exclusive one on a key such holders hold) in `shared.rs`.
async fn attempt_tx(client: &mut tokio_postgres::Client, ask: &Ask<'_>) -> PgResult<Step> {
    let st = ask.st;
    let req = ask.req;
    let tx = client.transaction().await?;
    if req.queue.supersede {
        // Given way to a newer superseding waiter: its row goes, and it gives up.
        let gone = tx.query_opt(&st.superseded, &[&req.key, &ask.w.id]).await?;
        if let Some(row) = gone {
            tx.commit().await?;
            return Ok(Step::Superseded(row.get(0)));
        }
    }
    if !req.sharing.is_exclusive() {
        let step = shared::attempt(&tx, ask).await?;
        tx.commit().await?;
        return Ok(step);
    }
    let key = &req.key;
    let (current, queue) = lock_row(&tx, ask).await?;
    let ttl = ms(req.ttl);
    if let Some(owner) = current.owner.as_ref().filter(|_| current.live) {
        if *owner == GROUP_OWNER {
            // Held shared or as a semaphore: waits beside readers, a conflict beside a
            // semaphore, or a nested run of a member.
            let step = shared::attempt(&tx, ask).await?;
            tx.commit().await?;
            return Ok(step);
        }
        let ours = *owner == req.owner;
        if ours || req.reenter.contains(owner) {
            // Our own grant whose answer was lost (claimed again), or a re-entry.
            let deeper = !ours;
            let row = tx
                .query_one(&st.extend, &[key, &ttl, &ask.w.id, &deeper])
                .await?;
            tx.commit().await?;
            return Ok(Step::Done(Outcome::Granted {
                owner: owner.clone(),
                token: row.get(0),
                reentered: deeper,
            }));
        }
    }
    let queue = queue.unwrap_or_default();
    let first = queue.head.as_ref().is_none_or(|head| *head == ask.w.id);
    if !current.live && (first || !req.fair) {
        let granted = grant(&tx, ask).await?;
        tx.commit().await?;
        return Ok(Step::Done(granted));
    }
    let busy = refused(&tx, ask, &queue, blocked(key, &current, &queue)).await?;
    tx.commit().await?;
    Ok(Step::Done(Outcome::Busy(busy)))
}

/// Locks the key's row (made if missing) and reads it, with the queue when the caller
/// waits in line.
async fn lock_row(tx: &Transaction<'_>, ask: &Ask<'_>) -> PgResult<(Current, Option<Queue>)> {
    let (st, key) = (ask.st, &ask.req.key);
    loop {
        let (row, queue) = match ask.req.fair {
            true => {
                let args: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [key];
                // Both answers awaited, the row's first: when locking the row fails (a
                // lock-wait timeout), the queue's read fails only because of it ("current
                // transaction is aborted"), and the row's error is the one that says why.
                let (row, q) = tokio::join!(
                    tx.query_opt(&st.lock_row, &args),
                    tx.query_one(&st.queue, &args)
                );
                (row?, Some(q?))
            }
            false => (tx.query_opt(&st.lock_row, &[key]).await?, None),
        };
        match row {
            Some(row) => return Ok((Current::read(&row), queue.map(|q| read_queue(&q)))),
            None => tx.execute(&st.insert_row, &[key]).await?,
        };
    }
}

/// What keeps an exclusive caller out of `key`: its live holder, or the waiters ahead.
fn blocked(key: &str, current: &Current, queue: &Queue) -> Blocked {
    let holder = current
        .owner
        .as_ref()
        .filter(|_| current.live)
        .map(|owner| {
            let holder = current.holder.as_deref();
            let (token, depth, left) = (current.token, current.depth, current.left_ms);
            info(key, owner, token, depth, holder, left)
        });
    Blocked {
        holder,
        live: current.live,
        retry_ms: match current.live {
            true => current.left_ms,
            false => queue.head_left_ms,
        },
    }
}

/// `unlock --force`: the row locked, then freed whoever holds it.
async fn force_tx(conn: &mut Conn, names: &Names, key: &str) -> PgResult<Released> {
    let st = &conn.st;
    let tx = conn.client.transaction().await?;
    let locked = tx.query_opt(&st.lock_row, &[&key]).await?;
    let previous_owner = match locked {
        Some(locked) => {
            let args: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                [&key, &names.channel, &payload('R', key)];
            let row = tx.query_opt(&st.force, &args).await?;
            let owner = row.and_then(|r| r.get::<_, Option<String>>(0));
            // Every member of a group goes: all of them are named.
            let current = Current::read(&locked);
            let group = owner
                .as_deref()
                .and_then(|o| live_group(o, current.holder.as_deref(), current.left_ms));
            match group {
                Some((g, _)) => Some(shared::members(&g)),
                None => owner,
            }
        }
        None => None,
    };
    tx.commit().await?;
    Ok(Released {
        previous_owner,
        still_held: false,
    })
}
