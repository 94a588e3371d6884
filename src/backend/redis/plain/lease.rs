//! One attempt, renew, release, Redlock's fencing confirmation and the state of one key
//! under `?layout=plain`, each one script (`*.lua` beside this file) sent by hash. They
//! are the server's (a [`RedisBackend`] whose URL says `?layout=plain`): [`PlainBackend`]
//! runs them on one server, Redlock on each server of its quorum.
//!
//! [`PlainBackend`]: super::PlainBackend

use std::time::{Duration, Instant};

use redis::Value;

use super::keys::PlainKeys;
use crate::backend::redis::reply::{holder_json, lock_info, Reply};
use crate::backend::redis::scripts::{evalsha, millis, Lua};
use crate::backend::redis::RedisBackend;
use crate::backend::store::{Attempt, Busy};
use crate::backend::{
    now_ms, AcquireRequest, Acquired, Holder, Lease, LockInfo, ReleaseMode, Released,
};
use crate::error::{Error, Result};

macro_rules! plain_lua {
    ($file:literal, $sha:literal) => {
        Lua {
            body: include_str!($file),
            sha: env!($sha),
        }
    };
}

static ACQUIRE: Lua = plain_lua!("acquire.lua", "DLOCK_LUA_SHA_PLAIN_ACQUIRE");
static RENEW: Lua = plain_lua!("renew.lua", "DLOCK_LUA_SHA_PLAIN_RENEW");
static RELEASE: Lua = plain_lua!("release.lua", "DLOCK_LUA_SHA_PLAIN_RELEASE");
static STATUS: Lua = plain_lua!("status.lua", "DLOCK_LUA_SHA_PLAIN_STATUS");
static FENCE: Lua = plain_lua!("fence.lua", "DLOCK_LUA_SHA_PLAIN_FENCE");

/// What `status` and a waiter show for a key an application holds: its token as the
/// owner, and no holder details (applications store none).
fn foreign(key: &str, value: String, pttl: i64) -> LockInfo {
    LockInfo {
        key: key.to_string(),
        owner: value,
        fencing_token: 0,
        holder: Holder {
            host: "application".to_string(),
            command: "foreign owner, not dlock".to_string(),
            ..Holder::default()
        },
        ttl_left_ms: u64::try_from(pttl).ok(),
        depth: 1,
    }
}

/// The holder of `key` from its value under K, its PTTL and dlock's holder hash fields:
/// dlock's holder when the hash names the owner K holds, a foreign one otherwise.
fn holder_of(key: &str, value: String, pttl: i64, fields: Vec<Option<String>>) -> LockInfo {
    let ours = fields.first().and_then(|o| o.as_deref()) == Some(value.as_str());
    match ours.then(|| lock_info(key, fields, pttl)).flatten() {
        Some(info) => info,
        None => foreign(key, value, pttl),
    }
}

impl RedisBackend {
    /// One attempt: `SET K owner NX PX ttl`, the counter raised to at least `floor`
    /// (Redlock's, 0 on one server) and bumped in the same script.
    pub(in crate::backend::redis) async fn plain_take(
        &self,
        req: &AcquireRequest,
        floor: u64,
    ) -> Result<Attempt> {
        let k = PlainKeys::new(&req.key);
        let keys = [req.key.as_str(), &k.fence, &k.meta];
        let mut cmd = evalsha(&ACQUIRE, &keys, 5 + req.reenter.len());
        let ttl = millis(req.ttl);
        cmd.arg(&req.owner).arg(ttl).arg(holder_json(&req.holder));
        cmd.arg(req.holder.acquired_at_ms.max(1)).arg(floor);
        for owner in &req.reenter {
            cmd.arg(owner);
        }
        let sent_at = Instant::now();
        let what = || format!("cannot acquire lock '{}'", req.key);
        let reply = self.eval(what, &ACQUIRE, &cmd).await?;
        let url = &self.server.url;
        let mut r = Reply::new(reply, url)?;
        let lease = |owner: &str, token: u64, reentered: bool| Acquired {
            lease: Lease::timed(&req.key, owner, token, req.ttl, reentered, sent_at),
            guard: None,
        };
        Ok(match r.next::<i64>()? {
            1 => Attempt::Granted(lease(&req.owner, r.next()?, false)),
            2 => {
                let token: u64 = r.next()?;
                Attempt::Granted(lease(&r.next::<String>()?, token, true))
            }
            _ => {
                let value: String = r.next()?;
                let pttl: i64 = r.next()?;
                let fields = r.lease_fields()?;
                Attempt::Busy(Busy {
                    holder: Some(holder_of(&req.key, value, pttl, fields)),
                    retry: u64::try_from(pttl).ok().map(Duration::from_millis),
                    ..Busy::default()
                })
            }
        })
    }

    /// Compare-and-`PEXPIRE`.
    pub(in crate::backend::redis) async fn plain_renew(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        let meta = PlainKeys::new(key).meta;
        let mut cmd = evalsha(&RENEW, &[key, &meta], 2);
        cmd.arg(owner).arg(millis(ttl));
        let sent_at = Instant::now();
        let what = || format!("cannot renew lock '{key}'");
        let reply = self.eval(what, &RENEW, &cmd).await?;
        let url = &self.server.url;
        let mut r = Reply::new(reply, url)?;
        match r.next::<i64>()? {
            1 => {
                let token: u64 = r.next()?;
                let pttl: u64 = r.next()?;
                let lease = Lease::timed(key, owner, token, ttl, false, sent_at);
                Ok(lease.expiring_at(now_ms() + pttl))
            }
            0 => Err(Error::lease_gone("renew", key, url)),
            _ => Err(Error::held_by_other("renew", key, url, owner)),
        }
    }

    /// Compare-and-delete (by force: delete whoever's lock K is).
    pub(in crate::backend::redis) async fn plain_release(
        &self,
        key: &str,
        owner: &str,
        mode: ReleaseMode,
    ) -> Result<Released> {
        let meta = PlainKeys::new(key).meta;
        let mode_arg = match mode {
            ReleaseMode::One => "one",
            ReleaseMode::All => "all",
            ReleaseMode::Force => "force",
        };
        let mut cmd = evalsha(&RELEASE, &[key, &meta], 2);
        cmd.arg(owner).arg(mode_arg);
        let what = || format!("cannot release lock '{key}'");
        let reply = self.eval(what, &RELEASE, &cmd).await?;
        let url = &self.server.url;
        let mut r = Reply::new(reply, url)?;
        match r.next::<i64>()? {
            1 => Ok(Released {
                previous_owner: Some(r.next()?),
                still_held: r.next::<i64>()? == 1,
            }),
            0 if mode == ReleaseMode::Force => Ok(Released {
                previous_owner: None,
                still_held: false,
            }),
            0 => Err(Error::lease_gone("release", key, url)),
            _ => Err(Error::held_by_other("release", key, url, owner)),
        }
    }

    /// Who holds `key`, dlock or an application; `None` when it is free.
    pub(in crate::backend::redis) async fn plain_holder(
        &self,
        key: &str,
    ) -> Result<Option<LockInfo>> {
        let meta = PlainKeys::new(key).meta;
        let cmd = evalsha(&STATUS, &[key, &meta], 0);
        let what = || format!("cannot read lock '{key}'");
        let reply: Value = self.eval(what, &STATUS, &cmd).await?;
        let mut r = Reply::new(reply, &self.server.url)?;
        let Some(value) = r.next::<Option<String>>()? else {
            return Ok(None);
        };
        let pttl: i64 = r.next()?;
        Ok(Some(holder_of(key, value, pttl, r.lease_fields()?)))
    }

    /// Redlock: raises dlock's fencing counter beside `key` to at least `token` and, when
    /// `owner` holds K here, stamps its holder hash with `token`. True when stamped.
    pub(in crate::backend::redis) async fn plain_fence(
        &self,
        key: &str,
        owner: &str,
        token: u64,
    ) -> Result<bool> {
        let k = PlainKeys::new(key);
        let mut cmd = evalsha(&FENCE, &[key, &k.fence, &k.meta], 2);
        cmd.arg(owner).arg(token);
        let what = || format!("cannot acquire lock '{key}'");
        let reply = self.eval(what, &FENCE, &cmd).await?;
        redis::from_redis_value::<i64>(reply)
            .map(|owned| owned == 1)
            .map_err(|e| Error::Internal(format!("unexpected reply from {}: {e}", self.server.url)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_time_hashes_match_the_scripts() {
        for lua in [&ACQUIRE, &RENEW, &RELEASE, &STATUS, &FENCE] {
            assert_eq!(redis::Script::new(lua.body).get_hash(), lua.sha);
        }
    }

    #[test]
    fn a_holder_hash_of_another_owner_makes_a_foreign_holder() {
        let fields = |owner: &str| {
            let mut f = vec![Some(owner.to_string()), Some("7".to_string())];
            f.extend([Some("1".into()), None, Some("5".into()), None]);
            f
        };
        let ours = holder_of("k", "abc".into(), 900, fields("abc"));
        assert_eq!((ours.owner.as_str(), ours.fencing_token), ("abc", 7));
        let app = holder_of("k", "uuid-1".into(), 900, fields("abc"));
        assert_eq!((app.owner.as_str(), app.fencing_token), ("uuid-1", 0));
        assert_eq!(app.holder.host, "application");
        assert_eq!(app.ttl_left_ms, Some(900));
    }
}
