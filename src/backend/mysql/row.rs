//! What an attempt and its shared-holder branch (`shared.rs`) both read and keep: the
//! waiter's place in line, the key's row as locked, the live queue, and what a release
//! found. Its own file so that `lease.rs` and `shared.rs` both import it, and not each
//! other both ways.

use mysql_async::prelude::Queryable;
use mysql_async::Transaction;

use super::connect::Tuning;
use super::schema::{wake_name, Sql};
use crate::backend::group::{Queued, GROUP_OWNER};
use crate::backend::sql::{holder_json, ms};
use crate::backend::store::Busy;
use crate::backend::{Holder, Queueing, Released, Sharing};

pub(super) type MyResult<T> = std::result::Result<T, mysql_async::Error>;

/// One acquisition's place in line, and the lease it last saw.
pub struct MyWaiter {
    pub(super) id: String,
    /// Its `--priority` and `--supersede`.
    pub(super) queueing: Queueing,
    /// The fencing token of the lease seen at the last look (`None`: none live).
    pub(super) seen: Option<u64>,
    /// How many looks in a row found that same lease.
    pub(super) same: u32,
    /// The named lock to block on until the one ahead moves (see `wait.rs`), as the last
    /// look found it held; `None`: look again on the schedule.
    pub(super) wake: Option<Wake>,
    /// The waiter's own connection for blocking on `wake` (opened at its first block).
    pub(super) blocker: Option<mysql_async::Conn>,
    /// `CONNECTION_ID()` of `blocker` while a block is under way: a block given up halfway
    /// (cancel, deadline) is ended on the server with `KILL QUERY`.
    pub(super) blocking: Option<u32>,
}

/// What a waiter blocks on: the named lock of the waiter just ahead of it, or of the
/// holder when it is the head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Wake {
    pub(super) name: String,
    /// True when it waits for the holder (the head of the queue).
    pub(super) head: bool,
}

impl MyWaiter {
    pub(super) fn new(queueing: Queueing) -> MyWaiter {
        MyWaiter {
            id: crate::ids::new_owner_id(),
            queueing,
            seen: None,
            same: 0,
            wake: None,
            blocker: None,
            blocking: None,
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

/// A key's row as an exclusive attempt reads it: [`Row`], whether this session holds the
/// waiter's named lock, whether the holder's named lock is held.
type NamedRow = (
    Option<String>,
    i64,
    i32,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    i64,
);

/// The key's row, as an attempt found it.
pub(super) struct Current {
    pub(super) owner: Option<String>,
    pub(super) token: i64,
    pub(super) depth: i32,
    pub(super) holder: Option<String>,
    pub(super) left_ms: i64,
    /// The named lock of the holder, when it is held (see `lock_row_named`).
    pub(super) wake: Option<String>,
    /// Whether this session holds the attempting waiter's named lock.
    pub(super) named: bool,
    /// How long ago the last lease ended (read by exclusive attempts only).
    pub(super) ended_ms: i64,
}

impl Current {
    pub(super) fn read((owner, token, depth, holder, left_ms): Row) -> Current {
        Current {
            owner,
            token,
            depth,
            holder,
            left_ms,
            wake: None,
            named: false,
            ended_ms: 0,
        }
    }

    /// The holder's named lock, from its `wake` field (see [`holder_waking`]).
    pub(super) fn wake_of(&self) -> Option<String> {
        wake_in(self.holder.as_deref()?)
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

/// The live queue, in line order (dead waiters are pruned as it is read; superseded ones
/// are out of the line).
#[derive(Default)]
pub(super) struct Queue {
    pub(super) ids: Vec<String>,
    /// Per waiter in `ids`: whether its session holds its named lock.
    pub(super) named: Vec<bool>,
    /// Per waiter in `ids`: its priority.
    pub(super) priorities: Vec<i32>,
    /// The head is alive by its named lock alone: it has not looked for a liveness period.
    pub(super) head_silent: bool,
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

/// [`lock_row`] for an exclusive attempt: also takes the waiter's named lock (unless this
/// session holds it already) and finds whether the holder's is held.
pub(super) async fn lock_row_named(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    key: &str,
    w: &MyWaiter,
) -> MyResult<Current> {
    let name = wake_name(&w.id);
    loop {
        let params = (&name, &name, key);
        match tx
            .exec_first::<NamedRow, _, _>(sql.lock_row_named.as_str(), params)
            .await?
        {
            Some((owner, token, depth, holder, left, named, held, ended)) => {
                let mut current = Current::read((owner, token, depth, holder, left));
                current.named = named == Some(1);
                current.ended_ms = ended;
                if held == Some(1) && current.live() {
                    current.wake = current.wake_of();
                }
                return Ok(current);
            }
            None => tx.exec_drop(sql.insert_row.as_str(), (key,)).await?,
        }
    }
}

/// The named lock a lease's holder JSON names (see [`holder_waking`]).
pub(super) fn wake_in(json: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    Some(wake_name(v.get("wake")?.as_str()?))
}

/// `holder` as a granted row keeps it, naming the waiter's named lock when its session
/// holds it: the head of the queue blocks on it while the lease lasts.
pub(super) fn holder_waking(holder: &Holder, w: &MyWaiter, named: bool) -> String {
    let json = holder_json(holder);
    if !named {
        return json;
    }
    match serde_json::from_str::<serde_json::Value>(&json) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.insert("wake".into(), w.id.clone().into());
            serde_json::Value::Object(map).to_string()
        }
        _ => json,
    }
}

/// One waiter's row as the queue reads it: id, liveness left (ms), named, superseded,
/// priority, and its holder JSON when asked for.
type QueueRow = (String, i64, bool, bool, i32, Option<String>);

/// The live waiters of `key` in line order, and whether `w` has a row; dead rows are
/// pruned. With `sharing` (a shared or semaphore attempt, or one beside a group), also the
/// sharing of the waiters ahead of `w` (where it stands or would stand): only then are the
/// waiters' holder columns read.
pub(super) async fn read_queue(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    key: &str,
    w: &MyWaiter,
    sharing: bool,
) -> MyResult<Queue> {
    let all: Vec<QueueRow> = match sharing {
        true => tx.exec(sql.queued.as_str(), (key,)).await?,
        false => {
            let rows: Vec<(String, i64, bool, bool, i32)> =
                tx.exec(sql.queue.as_str(), (key,)).await?;
            rows.into_iter()
                .map(|(id, left, named, gone, priority)| (id, left, named, gone, priority, None))
                .collect()
        }
    };
    let queued = all.iter().any(|(id, ..)| *id == w.id);
    let (alive, dead): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|(_, left, named, ..)| *left > 0 || *named);
    for (id, ..) in &dead {
        tx.exec_drop(sql.dequeue.as_str(), (key, id)).await?;
    }
    let live: Vec<QueueRow> = alive.into_iter().filter(|row| !row.3).collect();
    let mut queue = Queue {
        // A named head is alive however long ago it looked: those behind it look again
        // when a waiter that stopped looking would be dropped.
        head_left_ms: live.first().map_or(0, |(_, left, named, ..)| match named {
            true => (*left).max(ms(Tuning::default().liveness)),
            false => *left,
        }),
        named: live.iter().map(|row| row.2).collect(),
        priorities: live.iter().map(|row| row.4).collect(),
        head_silent: live.first().is_some_and(|row| row.1 == 0),
        ids: live.iter().map(|row| row.0.clone()).collect(),
        queued,
        ahead: Vec::new(),
    };
    if sharing {
        let place = queue.place_of(w);
        queue.ahead = live[..place]
            .iter()
            .map(|row| Queued::read(row.5.as_deref().unwrap_or_default()).sharing)
            .collect();
    }
    Ok(queue)
}

/// `--supersede`: the holder JSON of the newer waiter that took `w`'s place, whose row
/// goes (in `tx`, the key's row locked); `None` while it keeps its place.
pub(super) async fn given_way(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    key: &str,
    w: &MyWaiter,
) -> MyResult<Option<String>> {
    let by: Option<String> = tx.exec_first(sql.superseded.as_str(), (key, &w.id)).await?;
    if by.is_some() {
        tx.exec_drop(sql.dequeue.as_str(), (key, &w.id)).await?;
    }
    Ok(by)
}

/// `--supersede`, `w` queued (in `tx`, the key's row locked): the key's older pending
/// superseding waiter (one at most, but every one found) gives way to it, out of the line
/// at once; their ids, to be woken once `tx` commits, and taken out of `queue`. Only an
/// older one: a waiter that looks again after a newer one marked it cannot turn the
/// tables.
pub(super) async fn supersede(
    tx: &mut Transaction<'_>,
    sql: &Sql,
    key: &str,
    w: &MyWaiter,
    holder: &Holder,
    queue: &mut Queue,
) -> MyResult<Vec<String>> {
    let older: Vec<String> = tx
        .exec(sql.older_superseding.as_str(), (key, key, &w.id))
        .await?;
    let json = holder_json(holder);
    for id in &older {
        tx.exec_drop(sql.give_way.as_str(), (&json, key, id))
            .await?;
        if let Some(i) = queue.ids.iter().position(|q| q == id) {
            queue.ids.remove(i);
            queue.named.remove(i);
            queue.priorities.remove(i);
        }
    }
    Ok(older)
}

impl Queue {
    /// Where `w` stands in line (0-based), or, not in it, where it would stand: behind
    /// every waiter of its priority or higher.
    pub(super) fn place_of(&self, w: &MyWaiter) -> usize {
        match self.ids.iter().position(|id| *id == w.id) {
            Some(place) => place,
            None => self
                .priorities
                .iter()
                .filter(|p| **p >= w.queueing.priority)
                .count(),
        }
    }

    /// Drops a head that has not looked for `liveness` while the key has been free for as
    /// long (a stopped process: its session, and so its named lock, lives on); a head that
    /// is alive looks again as soon as the key is freed.
    pub(super) async fn drop_silent_head(
        &mut self,
        tx: &mut Transaction<'_>,
        sql: &Sql,
        key: &str,
        current: &Current,
        liveness: i64,
    ) -> MyResult<()> {
        if !self.head_silent || current.live() || current.ended_ms <= liveness {
            return Ok(());
        }
        let head = self.ids.remove(0);
        self.named.remove(0);
        self.priorities.remove(0);
        self.head_silent = false;
        tx.exec_drop(sql.dequeue.as_str(), (key, &head)).await
    }

    /// What the waiter at `position` (0-based) blocks on while it waits: the named lock of
    /// the live waiter just ahead of it in the order read above, or, at the head, of a
    /// holder whose named lock is held (`current.wake`). `None` when that one holds none
    /// (it looks again on the schedule).
    pub(super) fn wake_for(&self, position: usize, current: &Current) -> Option<Wake> {
        match position.checked_sub(1) {
            None => current.wake.clone().map(|name| Wake { name, head: true }),
            Some(ahead) => self
                .named
                .get(ahead)
                .copied()
                .unwrap_or(false)
                .then(|| Wake {
                    name: wake_name(&self.ids[ahead]),
                    head: false,
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current(holder: Option<&str>, wake: Option<&str>) -> Current {
        let mut c = Current::read((Some("o".into()), 1, 1, holder.map(str::to_string), 1000));
        c.wake = wake.map(str::to_string);
        c
    }

    #[test]
    fn a_waiter_blocks_on_the_one_just_ahead_or_the_holder() {
        let queue = Queue {
            ids: vec!["a".into(), "b".into(), "c".into()],
            named: vec![true, false, true],
            ..Queue::default()
        };
        let held = current(None, Some("dlock-w:h"));
        let head = queue.wake_for(0, &held).unwrap();
        assert_eq!((head.name.as_str(), head.head), ("dlock-w:h", true));
        let second = queue.wake_for(1, &held).unwrap();
        assert_eq!((second.name.as_str(), second.head), ("dlock-w:a", false));
        // The one ahead keeps no named lock: look again on the schedule.
        assert_eq!(queue.wake_for(2, &held), None);
        assert_eq!(queue.wake_for(3, &held).unwrap().name, "dlock-w:c");
        assert_eq!(queue.wake_for(0, &current(None, None)), None);
    }

    #[test]
    fn a_newcomer_stands_behind_its_priority_or_higher() {
        let queue = Queue {
            ids: vec!["a".into(), "b".into(), "c".into()],
            named: vec![true, true, true],
            priorities: vec![10, 5, 0],
            ..Queue::default()
        };
        let at = |priority| {
            MyWaiter::new(Queueing {
                priority,
                supersede: false,
            })
        };
        assert_eq!(queue.place_of(&at(0)), 3);
        assert_eq!(queue.place_of(&at(5)), 2);
        assert_eq!(queue.place_of(&at(11)), 0);
        let mut b = at(-3);
        b.id = "b".into();
        assert_eq!(queue.place_of(&b), 1, "in line: where it stands");
        // It blocks on the one just ahead in that order.
        assert_eq!(
            queue.wake_for(2, &current(None, None)).unwrap().name,
            "dlock-w:b"
        );
    }

    #[test]
    fn a_grant_names_its_named_lock_only_when_held() {
        let w = MyWaiter::new(Queueing::default());
        let holder = Holder::default();
        let named = holder_waking(&holder, &w, true);
        assert_eq!(wake_in(&named), Some(wake_name(&w.id)));
        assert_eq!(crate::backend::sql::holder_of(Some(&named)).pid, holder.pid);
        assert_eq!(wake_in(&holder_waking(&holder, &w, false)), None);
        assert!(current(Some(&named), None).wake_of().is_some());
    }
}
