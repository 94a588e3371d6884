//! What an attempt and its shared-holder branch (`shared.rs`) both read and keep: the
//! waiter's place in line, the key's row as locked, the live queue, and what a release
//! found. Its own file so that `lease.rs` and `shared.rs` both import it, and not each
//! other both ways.

use mysql_async::prelude::Queryable;
use mysql_async::Transaction;

use super::schema::Sql;
use crate::backend::group::{Queued, GROUP_OWNER};
use crate::backend::store::Busy;
use crate::backend::{Released, Sharing};

pub(super) type MyResult<T> = std::result::Result<T, mysql_async::Error>;

/// One acquisition's place in line, and the lease it last saw.
pub struct MyWaiter {
    pub(super) id: String,
    /// The fencing token of the lease seen at the last look (`None`: none live).
    pub(super) seen: Option<u64>,
    /// How many looks in a row found that same lease.
    pub(super) same: u32,
}

impl MyWaiter {
    pub(super) fn new() -> MyWaiter {
        MyWaiter {
            id: crate::ids::new_owner_id(),
            seen: None,
            same: 0,
        }
    }

    /// Counts the looks that found the lease `busy` names: 0 when it is a new one.
    pub(super) fn saw(&mut self, busy: &Busy) -> u32 {
        let token = busy.holder.as_ref().map(|h| h.fencing_token);
        self.same = match token == self.seen {
            true => self.same.saturating_add(1),
            false => 0,
        };
        self.seen = token;
        self.same
    }
}

/// A key's row: owner, token, depth, holder, milliseconds left.
pub(super) type Row = (Option<String>, i64, i32, Option<String>, i64);

/// The key's row, as an attempt found it.
pub(super) struct Current {
    pub(super) owner: Option<String>,
    pub(super) token: i64,
    pub(super) depth: i32,
    pub(super) holder: Option<String>,
    pub(super) left_ms: i64,
}

impl Current {
    pub(super) fn read((owner, token, depth, holder, left_ms): Row) -> Current {
        Current {
            owner,
            token,
            depth,
            holder,
            left_ms,
        }
    }

    pub(super) fn live(&self) -> bool {
        self.owner.is_some() && self.left_ms > 0
    }

    /// The owner of a live lease.
    pub(super) fn holder_id(&self) -> Option<&str> {
        self.owner.as_deref().filter(|_| self.live())
    }

    /// True when shared or semaphore holders keep the key (see `shared.rs`).
    pub(super) fn is_group(&self) -> bool {
        self.holder_id() == Some(GROUP_OWNER)
    }
}

/// The live queue (dead waiters are pruned as it is read).
#[derive(Default)]
pub(super) struct Queue {
    pub(super) ids: Vec<String>,
    pub(super) head_left_ms: i64,
    /// Whether this waiter has a row, live or not (to be deleted when it is granted).
    pub(super) queued: bool,
    /// The sharing each live waiter ahead of this one asks for (read by shared and
    /// semaphore attempts only).
    pub(super) ahead: Vec<Sharing>,
}

/// What a release found.
pub(super) enum Freed {
    Done(Released),
    /// Not ours: held by another (true) or gone (false).
    Refused(bool),
}

/// Locks `key`'s row, creating it on first use, and reads it.
pub(super) async fn lock_row(tx: &mut Transaction<'_>, sql: &Sql, key: &str) -> MyResult<Current> {
    loop {
        match tx
            .exec_first::<Row, _, _>(sql.lock_row.as_str(), (key,))
            .await?
        {
            Some(row) => return Ok(Current::read(row)),
            None => tx.exec_drop(sql.insert_row.as_str(), (key,)).await?,
        }
    }
}

/// The live waiters of `key` in order, and whether `w` has a row; dead rows are pruned.
/// With `sharing` (a shared or semaphore attempt, or one beside a group), also the sharing
/// of the waiters ahead of `w` (all of them when it has no row): only then are the
/// waiters' holder columns read.
pub(super) async fn read_queue(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    key: &str,
    w: &MyWaiter,
    sharing: bool,
) -> MyResult<Queue> {
    let all: Vec<(String, i64, Option<String>)> = match sharing {
        true => tx.exec(sql.queued.as_str(), (key,)).await?,
        false => {
            let rows: Vec<(String, i64)> = tx.exec(sql.queue.as_str(), (key,)).await?;
            rows.into_iter()
                .map(|(id, left)| (id, left, None))
                .collect()
        }
    };
    let queued = all.iter().any(|(id, _, _)| *id == w.id);
    let (live, dead): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, left, _)| *left > 0);
    if !dead.is_empty() {
        tx.exec_drop(sql.prune.as_str(), (key,)).await?;
    }
    let ahead = match sharing {
        true => {
            let mine = live.iter().position(|(id, _, _)| *id == w.id);
            live[..mine.unwrap_or(live.len())]
                .iter()
                .map(|(_, _, json)| Queued::read(json.as_deref().unwrap_or_default()).sharing)
                .collect()
        }
        false => Vec::new(),
    };
    Ok(Queue {
        head_left_ms: live.first().map_or(0, |(_, left, _)| *left),
        ids: live.into_iter().map(|(id, _, _)| id).collect(),
        queued,
        ahead,
    })
}
