//! One server's lease operations: the acquire attempt (also Redlock's), renew, release,
//! and Redlock's fencing confirmation.
//!
//! * acquire: if one of the caller's `reenter` owners holds the lease, the depth goes up.
//!   Otherwise dead waiters are pruned (liveness deadline passed), and the lease is granted
//!   when it is free and, if fair, the queue is empty or the caller is its head. If not, a
//!   fair caller joins the queue (or refreshes its liveness there) and learns its position.
//!   A `--no-wait` attempt never joins, and still cannot overtake a live queue.
//! * renew only extends (`PEXPIRE max(PTTL, ttl)`): a nested holder with a shorter TTL
//!   must not cut short the lease its parent's renewal schedule relies on.
//! * release deletes at depth 0 (or at once with `All`/`Force`) and wakes the head.
//! * `--shared` and `--limit N` go to the share script, which keeps several holders in the
//!   group (see `keys.rs`); an exclusive attempt goes there too when acquire finds a group.
//!   Renew, release and linger find a holder in the group when it is not the lease's.

use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use super::backend::KeptRun;
use super::backend::RedisBackend;
use super::keys::{run_keys, Keys};
use super::reply::{holder_json, lock_info, parse_holder, parse_sharing, Reply};
use super::scripts::{evalsha, millis, run_script, Lua, SCRIPTS};
use crate::backend::store::Attempt;
pub(crate) use crate::backend::store::Busy;
use crate::backend::{AcquireRequest, Lease, ReleaseMode, Released, Sharing};
use crate::error::{Error, Result};

/// What one acquire attempt on one server came to (the seam's answer is
/// [`store::Attempt`](crate::backend::store::Attempt)).
pub(crate) enum Tried {
    Granted(Lease),
    Busy(Busy),
}

/// A Redlock attempt's answer on one server: the attempt, or the key held here in a way the
/// caller must not join nor wait for (the holders' sharing), which the quorum reports
/// under its own name.
// One per server and round, moved once: not worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Vote {
    Tried(Tried),
    Conflict(Sharing),
}

/// How an acquire attempt treats the queue.
pub(super) struct QueueArgs<'a> {
    /// The waiter id (empty: none).
    pub(super) waiter: &'a str,
    /// The waiter's holder JSON, shown by `status`.
    pub(super) json: &'a str,
    pub(super) fair: bool,
    pub(super) join: Join,
}

/// Whether an attempt that is refused joins the queue (the script's `enqueue` argument).
#[derive(Clone, Copy)]
pub(super) enum Join {
    /// `--no-wait`, an expired deadline, unfair waiters, Redlock.
    No,
    Yes,
    /// Sent behind a `BLPOP`: acts at all only if the waiter is still queued.
    IfStillQueued,
}

impl Join {
    fn arg(self) -> &'static str {
        match self {
            Join::No => "0",
            Join::Yes => "1",
            Join::IfStillQueued => "2",
        }
    }
}

impl RedisBackend {
    /// One Redlock attempt on this server: one round trip that never joins (nor respects) a
    /// queue, and raises the fencing counter to at least `floor` before a fresh grant.
    pub(crate) async fn try_grant(&self, req: &AcquireRequest, floor: u64) -> Result<Vote> {
        if self.plain() {
            return Ok(Vote::Tried(match self.plain_take(req, floor).await? {
                Attempt::Granted(acquired) => Tried::Granted(acquired.lease),
                Attempt::Busy(busy) => Tried::Busy(busy),
            }));
        }
        let json = holder_json(&req.holder);
        let queue = QueueArgs {
            waiter: "",
            json: &json,
            fair: false,
            join: Join::No,
        };
        let k = Keys::new(&req.key);
        let (sent_at, reply) = self.send_acquire(req, &k, queue, floor).await?;
        if let Some(held) = conflict_of(&reply) {
            return Ok(Vote::Conflict(held));
        }
        self.parse_attempt(req, sent_at, reply).map(Vote::Tried)
    }

    /// Redlock: raises the fencing counter of `key` to at least `token` and, when `owner`
    /// holds the key here (the lease, or a place in the group that no other holder's
    /// `token` shares), stamps it with `token`. True when stamped.
    pub(crate) async fn confirm_token(&self, key: &str, owner: &str, token: u64) -> Result<bool> {
        if self.plain() {
            return self.plain_fence(key, owner, token).await;
        }
        let k = Keys::new(key);
        let script = &SCRIPTS.fence;
        let mut cmd = evalsha(script, &[&k.lease, &k.fence, &k.group], 2);
        cmd.arg(owner).arg(token);
        let what = || format!("cannot acquire lock '{key}'");
        let reply = self.eval(what, script, &cmd).await?;
        redis::from_redis_value::<i64>(reply)
            .map(|owned| owned == 1)
            .map_err(|e| Error::Internal(format!("unexpected reply from {}: {e}", self.server.url)))
    }

    /// The acquire script with the queue arguments `queue` and the fencing floor `floor`.
    pub(super) async fn run_acquire(
        &self,
        req: &AcquireRequest,
        k: &Keys,
        queue: QueueArgs<'_>,
        floor: u64,
    ) -> Result<Tried> {
        let (sent_at, reply) = self.send_acquire(req, k, queue, floor).await?;
        self.parse_attempt(req, sent_at, reply)
    }

    /// Runs the acquire script (the share script when the caller or the key shares);
    /// returns when the request was sent, and the reply.
    async fn send_acquire(
        &self,
        req: &AcquireRequest,
        k: &Keys,
        queue: QueueArgs<'_>,
        floor: u64,
    ) -> Result<(Instant, Value)> {
        let what = || format!("cannot acquire lock '{}'", req.key);
        let sent_at = Instant::now();
        if req.sharing.is_exclusive() {
            let cmd = self.acquire_cmd(req, k, &queue, floor);
            let reply = self.eval(what, &SCRIPTS.acquire, &cmd).await?;
            if !for_share(&reply) {
                return Ok((sent_at, reply));
            }
        }
        let cmd = self.share_cmd(req, k, &queue);
        let reply = self.eval(what, &SCRIPTS.share, &cmd).await?;
        Ok((sent_at, reply))
    }

    /// The attempt as the caller's sharing asks: the acquire script for an exclusive
    /// caller, else the share script.
    pub(super) fn attempt_cmd(&self, req: &AcquireRequest, k: &Keys, queue: &QueueArgs<'_>) -> Cmd {
        if req.sharing.is_exclusive() {
            self.acquire_cmd(req, k, queue, 0)
        } else {
            self.share_cmd(req, k, queue)
        }
    }

    /// The `EVALSHA` of the share script (see `redis/share.lua` for the arguments).
    fn share_cmd(&self, req: &AcquireRequest, k: &Keys, queue: &QueueArgs<'_>) -> Cmd {
        let keys = [
            &*k.lease, &*k.fence, &*k.queue, &*k.alive, &*k.info, &*k.unfair, &*k.group, &*k.ends,
        ];
        let sharing = sharing_arg(req.sharing);
        self.queue_cmd(&SCRIPTS.share, &keys, req, k, queue, sharing)
    }

    /// The `EVALSHA` of the acquire script (see `redis/acquire.lua` for the arguments).
    pub(super) fn acquire_cmd(
        &self,
        req: &AcquireRequest,
        k: &Keys,
        queue: &QueueArgs<'_>,
        floor: u64,
    ) -> Cmd {
        let keys = [
            &*k.lease, &*k.fence, &*k.queue, &*k.alive, &*k.info, &*k.unfair, &*k.group,
        ];
        self.queue_cmd(&SCRIPTS.acquire, &keys, req, k, queue, floor)
    }

    /// The arguments the acquire and share scripts take alike, in their order; `ninth` is
    /// the one where they differ (Redlock's token floor, or how the caller shares).
    fn queue_cmd(
        &self,
        script: &Lua,
        keys: &[&str],
        req: &AcquireRequest,
        k: &Keys,
        queue: &QueueArgs<'_>,
        ninth: impl redis::ToRedisArgs,
    ) -> Cmd {
        let flag = |b: bool| if b { "1" } else { "0" };
        let mut cmd = evalsha(script, keys, 12 + req.reenter.len());
        cmd.arg(&req.owner)
            .arg(millis(req.ttl))
            .arg(queue.waiter)
            .arg(flag(queue.fair))
            .arg(queue.join.arg())
            .arg(millis(self.server.tuning.liveness))
            .arg(&k.wake_prefix)
            .arg(queue.json)
            .arg(ninth)
            .arg(crate::backend::now_ms())
            .arg(req.queue.priority)
            .arg(flag(req.queue.supersede));
        for owner in &req.reenter {
            cmd.arg(owner);
        }
        cmd
    }

    pub(super) fn parse_attempt(
        &self,
        req: &AcquireRequest,
        sent_at: Instant,
        reply: Value,
    ) -> Result<Tried> {
        let mut r = Reply::new(reply, &self.server.url)?;
        let code = r.next::<i64>()?;
        if code == -4 {
            let by = parse_holder(&r.next::<String>()?).unwrap_or_default();
            return Err(Error::superseded(
                &req.key,
                &self.server.url,
                &by.host,
                by.pid,
            ));
        }
        if code == -3 {
            let held = parse_sharing(&r.next::<String>()?);
            return Err(req.sharing.conflict(&req.key, &self.server.url, held));
        }
        if code == 1 {
            let owner: String = r.next()?;
            let fencing_token: u64 = r.next()?;
            let _depth: u64 = r.next()?;
            let reentered = r.next::<i64>()? == 1;
            let now_ms: u64 = r.next()?;
            let pttl: u64 = r.next()?;
            let lease = Lease::timed(&req.key, owner, fencing_token, req.ttl, reentered, sent_at);
            return Ok(Tried::Granted(lease.expiring_at(now_ms + pttl)));
        }
        let position: u64 = r.next()?;
        let waiters: u64 = r.next()?;
        let retry: i64 = r.next()?;
        let pttl: i64 = r.next()?;
        let holder = lock_info(&req.key, r.lease_fields()?, pttl);
        Ok(Tried::Busy(Busy {
            holder,
            position: (position > 0).then_some(position),
            waiters: Some(waiters),
            retry: u64::try_from(retry).ok().map(Duration::from_millis),
        }))
    }

    /// Extends the lease of `owner` on `key` to at least `ttl` from now.
    pub(super) async fn renew_lease(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let k = Keys::new(key);
        let script = &SCRIPTS.renew;
        let what = || format!("cannot renew lock '{key}'");
        let sent_at = Instant::now();
        let mut conn = self.conn().await?;
        let mut reply = Value::Nil;
        // The lease alone first; a holder without one may hold a place in the group.
        for keys in [&[&*k.lease][..], &[&*k.lease, &*k.group, &*k.ends]] {
            let mut cmd = evalsha(script, keys, 2);
            cmd.arg(owner).arg(millis(ttl));
            reply = self
                .call_with(what, run_script(&mut conn, script, &cmd))
                .await?;
            if !is_gone(&reply) {
                break;
            }
        }
        let mut r = Reply::new(reply, &self.server.url)?;
        match r.next::<i64>()? {
            1 => {
                let fencing_token: u64 = r.next()?;
                let now_ms: u64 = r.next()?;
                let pttl: u64 = r.next()?;
                // `?min_replicas`: unacknowledged, the renewal failed (the lease is
                // extended on the master all the same; the holder's retry waits again).
                self.replicated(&mut conn, "renew", key, ttl).await?;
                let lease = Lease::timed(key, owner, fencing_token, ttl, false, sent_at);
                Ok(lease.expiring_at(now_ms + pttl))
            }
            code => Err(self.not_owner("renew", key, owner, code == 0)),
        }
    }

    /// `NotOwner` for `renew`/`release` by `owner`: the lease is gone, or someone else has it.
    fn not_owner(&self, verb: &str, key: &str, owner: &str, gone: bool) -> Error {
        if gone {
            Error::lease_gone(verb, key, &self.server.url)
        } else {
            Error::held_by_other(verb, key, &self.server.url, owner)
        }
    }

    /// Releases as `mode` says; `publish: false` wakes no waiter (Redlock taking back a
    /// grant that did not make a majority: the lock is no freer than before). `record`, a
    /// run kept for this release, is written by the same script.
    pub(crate) async fn release_with(
        &self,
        key: &str,
        owner: &str,
        (mode, publish): (ReleaseMode, bool),
        record: Option<&KeptRun>,
    ) -> Result<Released> {
        let k = Keys::new(key);
        let mode_arg = match mode {
            ReleaseMode::One => "one",
            ReleaseMode::All => "all",
            ReleaseMode::Force => "force",
        };
        let (wake_prefix, released) = if publish {
            (&*k.wake_prefix, &*k.released)
        } else {
            ("", "")
        };
        let script = &SCRIPTS.release;
        let [last_run, last_ok] = run_keys(key);
        let keys = [
            &*k.lease, &*k.queue, &*k.alive, &*k.info, &*k.unfair, &*k.group, &*k.ends, &*last_run,
            &*last_ok,
        ];
        let mut cmd = evalsha(script, &keys, 7);
        let (run, run_ttl, succeeded) = KeptRun::args(record);
        cmd.arg(owner).arg(mode_arg).arg(wake_prefix).arg(released);
        cmd.arg(run).arg(run_ttl).arg(succeeded);
        let what = || format!("cannot release lock '{key}'");
        let reply = self.eval(what, script, &cmd).await?;
        let mut r = Reply::new(reply, &self.server.url)?;
        match r.next::<i64>()? {
            1 => Ok(Released {
                previous_owner: Some(r.next()?),
                still_held: r.next::<i64>()? == 1,
            }),
            0 => Ok(Released {
                previous_owner: None,
                still_held: false,
            }),
            code => Err(self.not_owner("release", key, owner, code == -1)),
        }
    }

    /// Redlock: takes back a grant without waking anyone (see [`Self::release_with`]).
    pub(crate) async fn take_back(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<()> {
        if self.plain() {
            return self.plain_release(key, owner, mode).await.map(|_| ());
        }
        let how = (mode, false);
        self.release_with(key, owner, how, None).await.map(|_| ())
    }
}

/// True when the acquire script handed the attempt over to the share script (`{3}`: the
/// key has shared or semaphore holders), having changed nothing.
pub(super) fn for_share(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.first(), Some(Value::Int(3))))
}

/// The holders' sharing when the share script answered `{-3, mode}`: the key is held in a
/// way the caller must not join.
fn conflict_of(reply: &Value) -> Option<Sharing> {
    let Value::Array(items) = reply else {
        return None;
    };
    match items.as_slice() {
        [Value::Int(-3), mode, ..] => redis::from_redis_value::<String>(mode.clone())
            .ok()
            .map(|m| parse_sharing(&m)),
        _ => None,
    }
}

/// True for `{0}`: the lease is gone (renew and linger ask again with the group's keys).
pub(super) fn is_gone(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.as_slice(), [Value::Int(0)]))
}

/// A caller's sharing as the scripts take it: `x`, `s`, or N.
fn sharing_arg(sharing: Sharing) -> String {
    match sharing {
        Sharing::Exclusive => "x".to_string(),
        Sharing::Shared => "s".to_string(),
        Sharing::Limit(n) => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_travels_to_the_scripts_and_back() {
        for s in [Sharing::Exclusive, Sharing::Shared, Sharing::Limit(3)] {
            assert_eq!(parse_sharing(&sharing_arg(s)), s);
        }
    }

    #[test]
    fn only_a_three_hands_over() {
        assert!(for_share(&Value::Array(vec![Value::Int(3)])));
        assert!(!for_share(&Value::Array(vec![Value::Int(2)])));
    }
}
