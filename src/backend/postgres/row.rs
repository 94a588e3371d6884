//! What an attempt and its shared-holder branch (`shared.rs`) both read and write: the
//! waiter, the key's row as locked, the live queue, what blocks a refused attempt, and
//! the grant, refusal and leave statements. Its own file so that `lease.rs` and
//! `shared.rs` both import it, and not each other both ways.

use std::sync::PoisonError;
use std::time::Duration;

use tokio_postgres::{Row, Transaction};

use super::backend::Ended;
use super::schema::{payload, Names, Prepared};
use crate::backend::group::Queued;
use crate::backend::sql::{holder_json, ms, Outcome};
use crate::backend::store::Busy;
use crate::backend::{AcquireRequest, LockInfo};

pub(super) type PgResult<T> = std::result::Result<T, tokio_postgres::Error>;

/// One acquisition's place in line: its waiter id, and its subscription to wake-ups.
pub struct PgWaiter {
    pub(super) id: String,
    pub(super) notes: Option<tokio::sync::broadcast::Receiver<super::connect::Note>>,
    /// Where it says it has ended, so that its channel is no longer listened to.
    pub(super) ended: Ended,
}

impl Drop for PgWaiter {
    fn drop(&mut self) {
        let mut ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        ended.push(std::mem::take(&mut self.id));
    }
}

/// The key's row, as an attempt found it.
pub(super) struct Current {
    pub owner: Option<String>,
    pub token: i64,
    pub depth: i32,
    pub holder: Option<String>,
    pub live: bool,
    pub left_ms: i64,
}

impl Current {
    pub fn read(row: &Row) -> Current {
        Current {
            owner: row.get(0),
            token: row.get(1),
            depth: row.get(2),
            holder: row.get(3),
            live: row.get(4),
            left_ms: row.get(5),
        }
    }
}

/// The head of the live queue, dead waiters pruned.
#[derive(Default)]
pub(super) struct Queue {
    pub pruned: i64,
    /// The next to be admitted; `None` when nobody waits.
    pub head: Option<String>,
    pub head_left_ms: i64,
}

/// What one attempt asks, and of which statements.
pub(super) struct Ask<'a> {
    pub st: &'a Prepared,
    pub names: &'a Names,
    pub req: &'a AcquireRequest,
    pub w: &'a PgWaiter,
    pub enqueue: bool,
    pub liveness: Duration,
}

/// What keeps a refused attempt out: the holder shown, whether the key is held, and when
/// to look again by itself (ms).
pub(super) struct Blocked {
    pub holder: Option<LockInfo>,
    pub live: bool,
    pub retry_ms: i64,
}

/// Takes `waiter` out of the line and frees a grant to `owner` whose answer was lost, in
/// `tx`, which has locked the key's row; the head is woken if the key is free.
pub(super) async fn leave_in(
    tx: &Transaction<'_>,
    st: &Prepared,
    names: &Names,
    key: &str,
    waiter: &str,
    owner: &str,
) -> PgResult<()> {
    tx.query(&st.leave, &[&key, &waiter, &owner]).await?;
    let note = payload('R', key);
    tx.query(&st.wake_free, &[&key, &names.channel, &note])
        .await?;
    Ok(())
}

/// An exclusive grant of a free key (its row locked).
pub(super) async fn grant(tx: &Transaction<'_>, ask: &Ask<'_>) -> PgResult<Outcome> {
    let req = ask.req;
    let key = &req.key;
    let json = holder_json(&req.holder);
    let taken = payload('T', key);
    let ttl = ms(req.ttl);
    let args: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
        key,
        &req.owner,
        &ttl,
        &json,
        &ask.w.id,
        &ask.names.channel,
        &taken,
    ];
    let row = tx.query_one(&ask.st.grant, &args).await?;
    Ok(Outcome::Granted {
        owner: req.owner.clone(),
        token: row.get(0),
        reentered: false,
    })
}

/// A refusal: join the line or keep our place, and say what blocks us.
pub(super) async fn refused(
    tx: &Transaction<'_>,
    ask: &Ask<'_>,
    queue: &Queue,
    blocked: Blocked,
) -> PgResult<Busy> {
    let (st, req, w) = (ask.st, ask.req, ask.w);
    let key = &req.key;
    if req.fair && ask.enqueue {
        let json = queued_json(req);
        let (priority, superseding) = (req.queue.priority, req.queue.supersede);
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            key,
            &w.id,
            &ms(ask.liveness),
            &json,
            &priority,
            &superseding,
        ];
        tx.execute(&st.enqueue, &args).await?;
    }
    let gave_way = match req.fair && ask.enqueue && req.queue.supersede {
        true => {
            let json = holder_json(&req.holder);
            let row = tx.query_one(&st.supersede, &[key, &w.id, &json]).await?;
            row.get::<_, i64>(0) > 0
        }
        false => false,
    };
    if !blocked.live && (queue.pruned > 0 || gave_way) {
        // Free, and the head is a waiter that took over from dead ones: it may be asleep.
        tx.query(&st.notify, &[&ask.names.channel, &payload('R', key), key])
            .await?;
    }
    let (position, waiters) = match req.fair {
        true => {
            let row = tx.query_one(&st.place, &[key, &w.id]).await?;
            (row.get::<_, Option<i64>>(0), Some(row.get::<_, i64>(1)))
        }
        false => (None, None),
    };
    Ok(Busy {
        holder: blocked.holder,
        position: position.map(|p| p as u64),
        waiters: waiters.map(|n| n as u64),
        retry: Some(Duration::from_millis(blocked.retry_ms.max(0) as u64 + 1)),
    })
}

/// A waiter's holder as the queue keeps it: with the sharing it asks for, unless
/// exclusive (then as before groups existed).
pub(super) fn queued_json(req: &AcquireRequest) -> String {
    let holder = holder_json(&req.holder);
    if req.sharing.is_exclusive() {
        return holder;
    }
    Queued {
        sharing: req.sharing,
        holder: serde_json::from_str(&holder).unwrap_or_default(),
    }
    .encode()
}

/// The queue's head as the queue statement reads it.
pub(super) fn read_queue(row: &Row) -> Queue {
    Queue {
        pruned: row.get(0),
        head: row.get(1),
        head_left_ms: row.get(2),
    }
}
