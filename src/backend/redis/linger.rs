//! `exec --hold-at-least` and `dlock wait` on one server: leaving a lease to expire by
//! itself, and sleeping until a lock may have been released.
//!
//! * linger: one script sets the lease's expiry to exactly what is left of the hold (it may
//!   shorten it, which renew never does) and marks it `held_until` for `status`.
//! * watch: keyspace notifications are off on most servers, so a watcher uses what
//!   releases already do: while a lock's `unfair` marker exists, its release publishes on
//!   the released channel. The watcher subscribes, sets the marker, and only then looks
//!   whether the lease is still there: a release in between is seen either way. A lease
//!   that expires publishes nothing; the caller never sleeps past its TTL.

use std::time::Duration;

use futures_util::future::try_join_all;
use futures_util::StreamExt;

use redis::Value;

use super::backend::RedisBackend;
use super::keys::Keys;
use super::lease::is_gone;
use super::reply::Reply;
use super::scripts::{evalsha, millis, SCRIPTS};
use crate::error::{Error, Result};

/// The shortest life of the marker a watcher sets: a release publishes while it lasts.
const MARKER_AT_LEAST: Duration = Duration::from_secs(60);

impl RedisBackend {
    /// Leaves `owner`'s lease on `key` to expire `left` from now, marked for `status`.
    /// In the plain layout, K's expiry is set to `left` (its renewal sets it exactly).
    pub(crate) async fn linger_lease(&self, key: &str, owner: &str, left: Duration) -> Result<()> {
        if self.plain() {
            return self.plain_renew(key, owner, left).await.map(|_| ());
        }
        let k = Keys::new(key);
        let script = &SCRIPTS.linger;
        let what = || format!("cannot leave lock '{key}' held (--hold-at-least)");
        let mut reply = Value::Nil;
        // The lease alone first; a holder without one may hold a place in the group.
        for keys in [&[&*k.lease][..], &[&*k.lease, &*k.group, &*k.ends]] {
            let mut cmd = evalsha(script, keys, 2);
            cmd.arg(owner).arg(millis(left));
            reply = self.eval(what, script, &cmd).await?;
            if !is_gone(&reply) {
                break;
            }
        }
        match Reply::new(reply, &self.server.url)?.next::<i64>()? {
            1 => Ok(()),
            0 => Err(Error::lease_gone("hold", key, &self.server.url)),
            _ => Err(Error::held_by_other("hold", key, &self.server.url, owner)),
        }
    }

    /// Returns when one of `keys` may have been released, or after `pause`.
    pub(crate) async fn watch_released(&self, keys: &[String], pause: Duration) -> Result<()> {
        let Some(first) = keys.first() else {
            tokio::time::sleep(pause).await;
            return Ok(());
        };
        let what = format!("cannot watch lock '{first}'");
        let mut pubsub = self.subscribe_to(&Keys::new(first).released, &what).await?;
        for key in &keys[1..] {
            let channel = Keys::new(key).released;
            let subscribing = pubsub.subscribe(&channel);
            self.call(&what, subscribing).await?;
        }
        let marker_ms = millis((2 * pause).max(MARKER_AT_LEAST));
        let conn = self.conn().await?;
        // One pipeline per lock: on a Cluster, two locks' keys may live on two masters.
        let looks = keys.iter().map(|key| {
            let k = Keys::new(key);
            let mut pipe = redis::pipe();
            pipe.cmd("SET")
                .arg(&k.unfair)
                .arg(1)
                .arg("PX")
                .arg(marker_ms)
                .ignore();
            pipe.cmd("EXISTS").arg(&k.lease).arg(&k.group);
            let mut conn = conn.clone();
            async move { pipe.query_async::<(i64,)>(&mut conn).await }
        });
        let held = self.call(&what, try_join_all(looks)).await?;
        if held.iter().any(|(exists,)| *exists == 0) {
            return Ok(()); // already free
        }
        let mut messages = pubsub.on_message();
        let _ = tokio::time::timeout(pause, messages.next()).await;
        Ok(())
    }
}
