//! One acquire attempt and release (each a short transaction), renew and hold-at-least
//! (one statement each), and leaving the queue.
//!
//! An attempt locks the key's row first (`FOR UPDATE`, the row created on first use) and
//! only then reads the queue: in READ COMMITTED every statement sees what was committed
//! before it started, so the queue it reads is the one every other acquirer of the key
//! left behind. The row lock is held until the attempt commits, so the new token is the
//! one read plus one, committed with the grant.
//!
//! Shared and semaphore attempts, and an exclusive one that finds such holders, go on in
//! `shared.rs` under the same row lock; renew, hold-at-least and release go there only
//! when their exclusive statement found no lease of the caller's.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, TxOpts};

use super::backend::{on_conn, MysqlStore};
use super::row::{
    given_way, holder_waking, lock_row, lock_row_named, read_queue, supersede, Current, Freed,
    MyResult, MyWaiter, Queue, Row, Wake,
};
use super::schema::{wake_name, Sql, UNNAME};
use super::shared::{
    attempt_shared, first_member, linger_member, release_member, renew_member, Attempting, Decided,
};
use crate::backend::group::GROUP_OWNER;
use crate::backend::sql::{self, holder_json, info, ms, renewed, Outcome};
use crate::backend::store::{Attempt, Busy};
use crate::backend::{now_ms, AcquireRequest, Lease, ReleaseMode, Released};
use crate::error::{Error, Result};

/// How many times an attempt InnoDB rolled back to break a deadlock runs again.
const DEADLOCK_RETRIES: u32 = 3;

/// InnoDB rolled the whole transaction back to break a deadlock (`ER_LOCK_DEADLOCK`, see
/// [`sql::rolled_back`]).
fn deadlock(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if sql::rolled_back(&s.state))
}

impl MysqlStore {
    /// One attempt: take, re-enter or claim the key, or be refused (and queue).
    pub(super) async fn attempt_as(
        &self,
        req: &AcquireRequest,
        w: &mut MyWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        let sent_at = Instant::now();
        let liveness = self.server.tuning.liveness;
        let decided = on_conn!(self, "cannot acquire", |c| {
            let mut again = DEADLOCK_RETRIES;
            loop {
                match attempt_tx(c, &self.sql, req, w, enqueue, liveness).await {
                    Err(e) if again > 0 && deadlock(&e) => again -= 1,
                    done => break done,
                }
            }
        })?;
        let name = &self.server.target.name;
        match decided {
            Decided::Done(outcome) => Ok(outcome.attempt(req, sent_at)),
            Decided::Waits(busy, gave_way) => {
                self.wake_superseded(&gave_way).await;
                Ok(Outcome::Busy(busy).attempt(req, sent_at))
            }
            Decided::Conflict(held) => Err(req.sharing.conflict(&req.key, name, held)),
            Decided::Superseded(by) => {
                let by = sql::holder_of(Some(&by));
                Err(Error::superseded(&req.key, name, &by.host, by.pid))
            }
        }
    }

    /// Extends `owner`'s lease: one statement (and a read of what it left).
    pub(super) async fn renew_lease(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let sent_at = Instant::now();
        let row = on_conn!(self, "cannot renew", |c| {
            c.exec_drop(self.sql.renew.as_str(), (ms(ttl), key, owner))
                .await?;
            match c.affected_rows() {
                // Not an exclusive holder: perhaps one of a group (never a cost otherwise).
                0 => renew_member(c, &self.sql, key, owner, ttl).await,
                _ => {
                    c.exec_first::<(i64, i64), _, _>(self.sql.lease.as_str(), (key,))
                        .await
                }
            }
        })?;
        let Some(row) = row else {
            return Err(self.refusal("renew", key, owner).await);
        };
        Ok(renewed(key, owner, ttl, sent_at, row))
    }

    /// Leaves `owner`'s lease to expire `left` from now, marked as a finished run's
    /// (`exec --hold-at-least`): one statement.
    pub(super) async fn linger_lease(&self, key: &str, owner: &str, left: Duration) -> Result<()> {
        let until = (now_ms() + left.as_millis() as u64) as i64;
        let done = on_conn!(self, "cannot leave held", |c| {
            c.exec_drop(self.sql.linger.as_str(), (ms(left), until, key, owner))
                .await?;
            match c.affected_rows() {
                0 => linger_member(c, &self.sql, key, owner, left, until).await,
                n => Ok(n),
            }
        })?;
        match done {
            0 => Err(self.refusal("hold", key, owner).await),
            _ => Ok(()),
        }
    }

    /// Releases as `mode` says: one short transaction.
    pub(super) async fn release_lease(
        &self,
        key: &str,
        owner: &str,
        mode: ReleaseMode,
    ) -> Result<Released> {
        let freed = on_conn!(self, "cannot release", |c| {
            let (freed, wake) = release_tx(c, &self.sql, key, owner, mode).await?;
            if let Some(name) = wake {
                // After the commit: whoever it wakes finds the key free.
                c.exec_drop(UNNAME, (name,)).await?;
            }
            Ok(freed)
        })?;
        let name = &self.server.target.name;
        match freed {
            Freed::Done(released) => Ok(released),
            Freed::Refused(true) => Err(Error::held_by_other("release", key, name, owner)),
            Freed::Refused(false) => Err(Error::lease_gone("release", key, name)),
        }
    }

    /// Why `owner` may not renew or hold `key`: held by another, or gone.
    async fn refusal(&self, verb: &str, key: &str, owner: &str) -> Error {
        match self.held(key).await {
            Ok(true) => Error::held_by_other(verb, key, &self.server.target.name, owner),
            Ok(false) => Error::lease_gone(verb, key, &self.server.target.name),
            Err(e) => e,
        }
    }

    /// True while someone holds `key`.
    async fn held(&self, key: &str) -> Result<bool> {
        let live = on_conn!(self, "cannot read the lease", |c| {
            c.exec_first::<Option<i64>, _, _>(self.sql.why.as_str(), (key,))
                .await
        })?;
        Ok(live == Some(Some(1)))
    }

    /// Leaves the queue; a grant to `owner` whose answer never arrived goes too.
    pub(super) async fn leave_queue(&self, key: &str, waiter: &str, owner: &str) -> Result<()> {
        on_conn!(self, "cannot leave the queue", |c| {
            c.exec_drop(self.sql.dequeue.as_str(), (key, waiter))
                .await?;
            c.exec_drop(UNNAME, (wake_name(waiter),)).await?;
            c.exec_drop(self.sql.free_if.as_str(), (key, owner)).await
        })
    }
}

/// The attempt's transaction.
async fn attempt_tx(
    conn: &mut Conn,
    sql: &Sql,
    req: &AcquireRequest,
    w: &mut MyWaiter,
    enqueue: bool,
    liveness: Duration,
) -> MyResult<Decided> {
    let mut tx = conn.start_transaction(TxOpts::default()).await?;
    let key = req.key.as_str();
    w.wake = None;
    let current = match req.sharing.is_exclusive() {
        true => lock_row_named(&mut tx, sql, key, w).await?,
        false => lock_row(&mut tx, sql, key).await?,
    };
    if req.queue.supersede {
        if let Some(by) = given_way(&mut tx, sql, key, w).await? {
            tx.commit().await?;
            return Ok(Decided::Superseded(by));
        }
    }
    let ttl = ms(req.ttl);
    if let Some(owner) = current.holder_id() {
        let ours = owner == req.owner;
        if ours || req.reenter.iter().any(|o| o == owner) {
            // Our own grant whose answer was lost (claimed again), or a re-entry.
            let deeper = !ours;
            tx.exec_drop(sql.extend.as_str(), (i32::from(deeper), ttl, key))
                .await?;
            tx.exec_drop(sql.dequeue.as_str(), (key, &w.id)).await?;
            tx.commit().await?;
            return Ok(Decided::Done(Outcome::Granted {
                owner: owner.to_string(),
                token: current.token,
                reentered: deeper,
            }));
        }
    }
    let how = Attempting {
        req,
        w: &*w,
        enqueue,
        liveness,
    };
    if !req.sharing.is_exclusive() || current.is_group() {
        return attempt_shared(tx, sql, &how, current).await;
    }
    let mut queue = match req.fair {
        true => read_queue(&mut tx, sql, key, w, false).await?,
        false => Queue::default(),
    };
    if queue.ids.first().is_some_and(|head| *head != w.id) {
        let liveness = ms(liveness);
        queue
            .drop_silent_head(&mut tx, sql, key, &current, liveness)
            .await?;
    }
    if !current.live() && (queue.place_of(w) == 0 || !req.fair) {
        let json = holder_waking(&req.holder, w, current.named);
        tx.exec_drop(sql.grant.as_str(), (&req.owner, ttl, json, key))
            .await?;
        if queue.queued {
            tx.exec_drop(sql.dequeue.as_str(), (key, &w.id)).await?;
        }
        tx.commit().await?;
        return Ok(Decided::Done(Outcome::Granted {
            owner: req.owner.clone(),
            token: current.token + 1,
            reentered: false,
        }));
    }
    let (busy, gave_way) = wait_in_line(&mut tx, sql, &how, &current, &mut queue).await?;
    tx.commit().await?;
    w.wake = busy.1;
    Ok(Decided::Waits(busy.0, gave_way))
}

/// An exclusive refusal (in `tx`, the key's row locked): joins the line or keeps its
/// place (making the older superseding waiter give way), and says what blocks it and what
/// it blocks on; with the ids of the waiters that gave way.
async fn wait_in_line(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    how: &Attempting<'_>,
    current: &Current,
    queue: &mut Queue,
) -> MyResult<((Busy, Option<Wake>), Vec<String>)> {
    let (req, w, key) = (how.req, how.w, how.req.key.as_str());
    let mut gave_way = Vec::new();
    let queued = queue.ids.contains(&w.id);
    if req.fair && how.enqueue {
        let json = holder_json(&req.holder);
        let alive = ms(how.liveness);
        let (priority, superseding) = (req.queue.priority, req.queue.supersede);
        let params = (key, &w.id, alive, json, priority, superseding, alive);
        tx.exec_drop(sql.enqueue.as_str(), params).await?;
        if superseding {
            gave_way = supersede(tx, sql, key, w, &req.holder, queue).await?;
        }
    }
    let place = queue.place_of(w);
    let mut wake = None;
    if req.fair && current.named && (how.enqueue || queued) {
        wake = queue.wake_for(place, current);
    }
    let (position, waiters) = match (queued, req.fair && how.enqueue) {
        (true, _) => (Some(place), queue.ids.len()),
        (false, true) => (Some(place), queue.ids.len() + 1),
        (false, false) => (None, queue.ids.len()),
    };
    let mut busy = busy(req, current, queue, position, waiters);
    if wake.as_ref().is_some_and(|wake| !wake.head) {
        // Woken when the one ahead moves, whatever the lease does meanwhile.
        busy.retry = None;
    }
    Ok(((busy, wake), gave_way))
}

/// A refusal: what blocks us, and where we stand.
fn busy(
    req: &AcquireRequest,
    current: &Current,
    queue: &Queue,
    position: Option<usize>,
    waiters: usize,
) -> Busy {
    let holder = current.holder_id().map(|owner| {
        info(
            &req.key,
            owner,
            current.token,
            current.depth,
            current.holder.as_deref(),
            current.left_ms,
        )
    });
    // Free but promised to the head: if the head is dead, it may be ours at its deadline.
    let retry = match current.live() {
        true => current.left_ms,
        false => queue.head_left_ms,
    };
    Busy {
        holder,
        position: position.map(|p| p as u64 + 1),
        waiters: req.fair.then_some(waiters as u64),
        retry: Some(Duration::from_millis(retry.max(0) as u64 + 1)),
    }
}

/// A release's transaction: the row locked, checked, then one level less or freed; with
/// the named lock of a holder that is gone (see `wait.rs`).
async fn release_tx(
    conn: &mut Conn,
    sql: &Sql,
    key: &str,
    owner: &str,
    mode: ReleaseMode,
) -> MyResult<(Freed, Option<String>)> {
    let mut wake = None;
    let mut tx = conn.start_transaction(TxOpts::default()).await?;
    let row = tx
        .exec_first::<Row, _, _>(sql.lock_row.as_str(), (key,))
        .await?;
    let current = row.map(Current::read);
    let holder = current
        .as_ref()
        .and_then(|c| c.holder_id())
        .map(str::to_string);
    let freed = match mode {
        ReleaseMode::Force => {
            let mut previous_owner = holder;
            if let Some(current) = &current {
                if current.is_group() {
                    previous_owner = first_member(&mut tx, sql, current).await?;
                }
                tx.exec_drop(sql.free.as_str(), (key,)).await?;
            }
            Freed::Done(Released {
                previous_owner,
                still_held: false,
            })
        }
        _ if holder.as_deref() == Some(GROUP_OWNER) => {
            let current = current.expect("a group is held in a row");
            let one_level = mode == ReleaseMode::One;
            release_member(&mut tx, sql, key, owner, one_level, &current).await?
        }
        _ if holder.as_deref() != Some(owner) => Freed::Refused(holder.is_some()),
        _ => {
            let depth = current.as_ref().map_or(0, |c| c.depth);
            let still_held = mode == ReleaseMode::One && depth > 1;
            let text = if still_held {
                &sql.shallower
            } else {
                &sql.free
            };
            tx.exec_drop(text.as_str(), (key,)).await?;
            if !still_held {
                wake = current.as_ref().and_then(Current::wake_of);
            }
            Freed::Done(Released {
                previous_owner: Some(owner.to_string()),
                still_held,
            })
        }
    };
    tx.commit().await?;
    Ok((freed, wake))
}
