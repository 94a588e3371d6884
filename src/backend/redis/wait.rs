//! A waiter's life in the queue: its attempts, its sleep until woken, and leaving.
//!
//! * Fair waiters: after a refusal the waiter blocks in `BLPOP` on its own wake list. A
//!   release (and a waiter leaving a free lock) prunes the dead and pushes one element to
//!   the live head's list only: no thundering herd; a push that comes before the `BLPOP`
//!   waits in the list, so none is missed. The next acquire attempt is pipelined behind
//!   the `BLPOP`, so the server runs it the moment the waiter is woken: a hand-off costs
//!   no client round trip. The `BLPOP` times out when the lease or a stale head may have
//!   expired, or after at most one heartbeat; every attempt refreshes the waiter's
//!   liveness. An attempt whose reply was never read (the wait was given up meanwhile) may
//!   have been granted: the next attempt of the same owner claims that lease, and leaving
//!   the queue releases it.
//! * Unfair waiters (`--no-fair`): the waiter subscribes to the released channel on a
//!   separate pub/sub connection and tries again at once, so no release can slip between
//!   the refusal and the subscription, then sleeps until a message or the same timeouts.
//! * Behind Sentinel or on a Cluster, a failure met while the master fails over or a slot
//!   moves is [`Error::Transient`](crate::error::Error::Transient) (see `connect.rs`): the
//!   waiting loop rides it out for up to its
//!   [`RIDE_OUT`](crate::backend::waiting::RIDE_OUT), and the request that met it dropped
//!   the shared connection, so the next attempt reconnects to the master found again.
//! * Cancel, timeout, or an error leave the queue (a dropped waiter leaves from a spawned
//!   task); a waiter killed outright drops out when its liveness deadline passes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::PubSub;
use redis::{Cmd, Value};

use super::backend::RedisBackend;
use super::conn::Conn;
use super::keys::Keys;
use super::lease::{for_share, Join, QueueArgs, Tried};
use super::reply::holder_json;
use super::scripts::{run_script, SCRIPTS};
use crate::backend::store::{self, Woken};
use crate::backend::{AcquireRequest, Acquired};
use crate::error::Result;

/// How long past a `BLPOP` timeout we still wait for the server to answer: Redis checks
/// blocked clients' timeouts about every 100 ms, not to the millisecond.
const BLPOP_LATE: Duration = Duration::from_millis(150);

/// One waiting acquisition: its id in the queue, and the duty to leave the queue.
/// Dropped while queued, it leaves from a spawned task.
pub struct Waiter {
    id: String,
    /// The owner id of the request: a grant whose reply was never read is released too.
    owner: String,
    keys: Keys,
    /// The holder JSON stored for `status`.
    json: String,
    /// True when we may be in the queue, or an attempt whose answer was not read may
    /// have been granted: leaving undoes both.
    queued: bool,
    /// The shared connection, as of the last attempt.
    conn: Conn,
    /// The connection this waiter blocks on when the backend is not exclusive.
    blocking: Option<Conn>,
    /// The connection the last grant came on: `?min_replicas` waits on it.
    granted_on: Option<Conn>,
    /// The pub/sub connection of an unfair waiter, once subscribed (in a mutex only so
    /// that the waiter is `Sync`; one task uses it).
    wakeups: Mutex<Option<PubSub>>,
    /// A request failed: the server may not answer, so leaving goes on in the background
    /// instead of making the caller wait for another timeout.
    failed: bool,
    limit: Duration,
}

impl Waiter {
    /// Leaves the queue, best effort: if this fails, liveness expiry removes us.
    async fn leave(&mut self) {
        if std::mem::take(&mut self.queued) {
            let conn = self.conn.clone();
            let request = leave_queue(conn, &self.keys, &self.id, &self.owner);
            let _ = tokio::time::timeout(self.limit, request).await;
        }
    }

    /// Leaves without counting on an answer (the server is not answering): the script is
    /// sent whole, as a server that never ran it would refuse it by hash, and by then
    /// nobody may be left to send it again.
    async fn leave_unanswered(&mut self) {
        if std::mem::take(&mut self.queued) {
            let script = &SCRIPTS.leave;
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(script.body);
            add_leave_args(&mut cmd, &self.keys, &self.id, &self.owner);
            let mut conn = self.conn.clone();
            let request = cmd.query_async::<Value>(&mut conn);
            let _ = tokio::time::timeout(self.limit, request).await;
        }
    }

    fn queue_args(&self, fair: bool, join: Join) -> QueueArgs<'_> {
        QueueArgs {
            waiter: &self.id,
            json: &self.json,
            fair,
            join,
        }
    }

    fn take_wakeups(&self) -> Option<PubSub> {
        self.wakeups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn put_wakeups(&self, pubsub: PubSub) {
        *self.wakeups.lock().unwrap_or_else(|p| p.into_inner()) = Some(pubsub);
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (conn, keys) = (self.conn.clone(), self.keys.clone());
        let (id, owner) = (
            std::mem::take(&mut self.id),
            std::mem::take(&mut self.owner),
        );
        let limit = self.limit;
        runtime.spawn(async move {
            let leave = leave_queue(conn, &keys, &id, &owner);
            let _ = tokio::time::timeout(limit, leave).await;
        });
    }
}

/// Runs the leave script for waiter `id` of request `owner`.
async fn leave_queue(
    mut conn: Conn,
    keys: &Keys,
    id: &str,
    owner: &str,
) -> redis::RedisResult<i64> {
    let script = &SCRIPTS.leave;
    let mut cmd = Cmd::with_capacity(10, 256);
    cmd.arg("EVALSHA").arg(script.sha);
    add_leave_args(&mut cmd, keys, id, owner);
    Ok(redis::from_redis_value(
        run_script(&mut conn, script, &cmd).await?,
    )?)
}

/// The keys and arguments of the leave script, after its body or hash.
fn add_leave_args(cmd: &mut Cmd, keys: &Keys, id: &str, owner: &str) {
    cmd.arg(6)
        .arg(&keys.queue)
        .arg(&keys.alive)
        .arg(&keys.info)
        .arg(&keys.lease)
        .arg(&keys.group)
        .arg(&keys.ends);
    cmd.arg(id).arg(&keys.wake_prefix).arg(owner);
}

/// True when a pipelined attempt found its waiter no longer queued (`{2}`), e.g. pruned
/// after a pause: the next attempt joins the queue again.
fn left_queue(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.first(), Some(Value::Int(2))))
}

/// How long a fair waiter waits for its wake-up: the pause asked of the server, and when
/// to stop waiting for its answer (the server may answer a little late, which saves a
/// reconnection; the waiting loop still ends the sleep at the deadline).
#[derive(Debug, Clone, Copy)]
struct Pause {
    server: Duration,
    client: Duration,
}

impl Pause {
    fn new(pause: Duration) -> Pause {
        Pause {
            server: pause,
            client: pause + BLPOP_LATE.min(pause / 2),
        }
    }
}

/// The connection a `BLPOP` blocks, while it may be blocked. Dropped before the server
/// answered (our timer ran out, the sleep was cancelled or dropped), it makes sure no one
/// queues a request behind that `BLPOP`: the shared connection (exclusive backend) is
/// reopened on next use, and a waiter's own connection is dropped with it.
struct Blocked<'a> {
    backend: &'a RedisBackend,
    /// The waiter's own connection; `None` when the shared one is blocked.
    own: Option<Conn>,
    armed: bool,
}

impl Blocked<'_> {
    /// The server answered: the connection is free again. Returns the waiter's own.
    fn answered(mut self) -> Option<Conn> {
        self.armed = false;
        self.own.take()
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        if self.armed && self.own.is_none() {
            self.backend.forget_conn();
        }
    }
}

/// A granted lease, as the waiting loop takes it.
fn granted(lease: crate::backend::Lease) -> store::Attempt {
    store::Attempt::Granted(Acquired { lease, guard: None })
}

impl RedisBackend {
    /// The state of a new acquisition: a fresh waiter id, not queued yet.
    pub(super) fn waiter(&self, req: &AcquireRequest, conn: Conn) -> Waiter {
        Waiter {
            id: crate::ids::new_owner_id(), // a waiter id is as random as an owner id
            owner: req.owner.clone(),
            keys: Keys::new(&req.key),
            json: holder_json(&req.holder),
            queued: false,
            conn,
            blocking: None,
            granted_on: None,
            wakeups: Mutex::new(None),
            failed: false,
            limit: self.server.tuning.op_timeout,
        }
    }

    /// One acquire attempt of a waiter: one round trip, on the shared connection as it is
    /// now (reopened when the last request found it broken).
    pub(super) async fn attempt_as(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        enqueue: bool,
    ) -> Result<store::Attempt> {
        let conn = self.conn().await; // the current one, if it was reopened
        waiter.failed = conn.is_err();
        waiter.conn = conn?;
        let queued = waiter.queued || enqueue;
        waiter.queued = true; // until the answer is read, it may be a grant
        let join = if enqueue { Join::Yes } else { Join::No };
        let queue = waiter.queue_args(req.fair, join);
        let attempt = self.run_acquire(req, &waiter.keys, queue, 0).await;
        waiter.queued = queued;
        match attempt {
            Ok(Tried::Granted(lease)) => {
                waiter.queued = false; // the script took us off the queue
                waiter.granted_on = Some(waiter.conn.clone());
                Ok(granted(lease))
            }
            Ok(Tried::Busy(busy)) => Ok(store::Attempt::Busy(busy)),
            Err(e) => {
                waiter.failed = true;
                Err(e)
            }
        }
    }

    /// Sleeps until woken or `pause` ends: fair waiters in `BLPOP`, unfair ones on pub/sub.
    pub(super) async fn sleep_as(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        pause: Duration,
    ) -> Result<Woken> {
        let woken = if req.fair {
            self.sleep_fair(req, waiter, Pause::new(pause)).await
        } else {
            self.sleep_unfair(req, waiter, pause).await
        };
        waiter.failed = woken.is_err();
        woken
    }

    /// A fair waiter sleeps in `BLPOP` on its wake list: no subscription, and a wake-up
    /// sent before the `BLPOP` waits in the list, so it cannot be missed. The next acquire
    /// attempt is pipelined behind the `BLPOP`: the server runs it the moment the waiter is
    /// woken (or its `BLPOP` times out), so a hand-off costs no round trip of ours. The
    /// attempt's lease is counted from before the `BLPOP` was sent: safe, and stale by
    /// the wait at most; a grant staler than a tenth of the TTL is claimed again at once.
    ///
    /// On an exclusive backend this blocks the shared connection (one connection per
    /// process); otherwise other callers must not queue behind it, so the waiter opens one
    /// of its own. If our timer (`pause.client`) or a cancel beats the server's answer,
    /// that connection is dropped (see [`Blocked`]); the attempt may still be granted on
    /// its way, which the next attempt (or leaving) finds by the owner id.
    async fn sleep_fair(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        pause: Pause,
    ) -> Result<Woken> {
        let exclusive = self.server.tuning.exclusive;
        let own = match (waiter.blocking.take(), exclusive) {
            (_, true) => None,
            (Some(conn), false) => Some(conn),
            (None, false) => Some(self.open_own().await?),
        };
        let mut conn = own.clone().unwrap_or_else(|| waiter.conn.clone());
        let pipe = self.wake_pipe(req, waiter, pause);
        waiter.queued = true; // the attempt behind the BLPOP may be granted, read or not
        let blocked = Blocked {
            backend: self,
            own,
            armed: true,
        };
        let sent_at = Instant::now();
        let request = pipe.query_async::<(Value, Value)>(&mut conn);
        let reply = match tokio::time::timeout(pause.client, request).await {
            Ok(Ok((_, reply))) => reply,
            // Late, or failed (e.g. NOSCRIPT: the next plain attempt loads the script).
            _ => return Ok(Woken::Again),
        };
        // Handed over to the share script: the next attempt goes there.
        if left_queue(&reply) || for_share(&reply) {
            waiter.blocking = blocked.answered();
            return Ok(Woken::Again);
        }
        let attempt = match self.parse_attempt(req, sent_at, reply) {
            Ok(attempt) => attempt,
            // Superseded: the waiter is off the queue already, and gives up now.
            Err(e @ crate::error::Error::Superseded(_)) => {
                waiter.queued = false;
                waiter.blocking = blocked.answered();
                return Err(e);
            }
            Err(_) => return Ok(Woken::Again),
        };
        waiter.blocking = blocked.answered();
        Ok(match attempt {
            // Claimed again, fresh, by the next attempt.
            Tried::Granted(_) if sent_at.elapsed() > req.ttl / 10 => Woken::Again,
            Tried::Granted(lease) => {
                waiter.queued = false;
                waiter.granted_on = Some(conn);
                Woken::Answered(Box::new(granted(lease)))
            }
            Tried::Busy(busy) => Woken::Answered(Box::new(store::Attempt::Busy(busy))),
        })
    }

    /// The `BLPOP` on the waiter's wake list, and the attempt behind it that acts only if
    /// the waiter is still queued.
    fn wake_pipe(&self, req: &AcquireRequest, waiter: &Waiter, pause: Pause) -> redis::Pipeline {
        let mut blpop = Cmd::with_capacity(3, 64);
        blpop
            .arg("BLPOP")
            .arg(waiter.keys.wake(&waiter.id))
            .arg(format!("{:.3}", pause.server.as_secs_f64().max(0.001)));
        let queue = waiter.queue_args(true, Join::IfStillQueued);
        let mut pipe = redis::pipe();
        pipe.add_command(blpop)
            .add_command(self.attempt_cmd(req, &waiter.keys, &queue));
        pipe
    }

    /// An unfair waiter subscribes first, then looks again at once (a release that came
    /// before the subscription was complete cannot be missed); after that it sleeps until
    /// a release is published or `pause` ends.
    async fn sleep_unfair(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        pause: Duration,
    ) -> Result<Woken> {
        let Some(mut pubsub) = waiter.take_wakeups() else {
            let what = format!("cannot wait for lock '{}'", req.key);
            let pubsub = self.subscribe_to(&waiter.keys.released, &what).await?;
            waiter.put_wakeups(pubsub);
            return Ok(Woken::Again);
        };
        let mut messages = pubsub.on_message();
        let open = tokio::select! {
            m = messages.next() => m.is_some(),
            _ = tokio::time::sleep(pause) => true,
        };
        drop(messages);
        if open {
            waiter.put_wakeups(pubsub);
        }
        Ok(Woken::Again)
    }

    /// Leaves the queue after a cancel, on the connection the cancelled attempt went out on
    /// when there is one (the server, when it answers again, runs the leave after that
    /// attempt, which undoes a grant it may bring), or on a new one when a cancelled
    /// `BLPOP` took it (see [`Blocked`]). The caller bounds the time spent.
    pub(super) async fn leave_after_cancel(&self, waiter: &mut Waiter) {
        if !self.has_conn() {
            match self.conn().await {
                Ok(conn) => waiter.conn = conn,
                Err(_) => return,
            }
        }
        waiter.leave_unanswered().await;
    }

    /// With `?min_replicas`, makes `attempt` count only once enough replicas acknowledged
    /// its grant (on the connection that wrote it); a grant they did not acknowledge is
    /// given back, and the error says how many did. While the replicas are awaited, the
    /// waiter counts as queued: a cancel then, or a drop, leaves and so releases the grant.
    pub(super) async fn acknowledged(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        attempt: store::Attempt,
    ) -> Result<store::Attempt> {
        let conn = waiter.granted_on.take();
        let store::Attempt::Granted(acquired) = &attempt else {
            return Ok(attempt);
        };
        if self.min_replicas.is_none() {
            return Ok(attempt);
        }
        let mut conn = conn.unwrap_or_else(|| waiter.conn.clone());
        let lease = &acquired.lease;
        waiter.queued = !lease.reentered;
        let acked = self
            .replicated(&mut conn, "acquire", &req.key, req.ttl)
            .await;
        waiter.queued = false;
        if let Err(e) = acked {
            let mode = crate::backend::ReleaseMode::One;
            let _ = self
                .release_with(&lease.key, &lease.owner, (mode, true), None)
                .await;
            return Err(e);
        }
        Ok(attempt)
    }

    /// Leaves the queue after a wait that ended without a lease and without a cancel.
    pub(super) async fn leave_as(&self, mut waiter: Waiter) {
        if !waiter.failed {
            waiter.leave().await;
        } // else the waiter's drop leaves in the background
    }
}
