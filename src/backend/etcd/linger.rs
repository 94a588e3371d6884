//! `exec --hold-at-least` and `dlock wait` on etcd.
//!
//! * linger: an etcd lease keeps the TTL it was granted with, and a keep-alive only resets
//!   it to that TTL, so the holder's lease can neither be shortened to what is left of the
//!   hold nor stretched past its TTL. The holder's key is moved instead, in one
//!   transaction that checks it is unchanged, onto a new lease granted for what is left
//!   (rounded up to whole seconds), which nobody keeps alive: the server deletes the key
//!   when it expires, after dlock has exited. The key keeps its name and create revision,
//!   so it stays the holder (waiters, `etcdctl lock` included, go on watching it), and its
//!   token is written into its value. The old lease is then revoked: nothing is on it.
//! * watch: a watch on the lock's prefix for deletions (a release revokes the holder's
//!   lease, and an expiry deletes its key, both seen as a delete), from just after the
//!   revision at which the lock was seen held.

use std::time::Duration;

use super::proto::{RangeRequest, Request, ResponseHeader, TxnResponse};
use super::recipe;
use super::store::{whole_seconds, EtcdStore};
use crate::backend::line::Contender;
use crate::backend::now_ms;
use crate::error::{Error, Result};

impl EtcdStore {
    /// Moves `owner`'s key on `key` onto a new lease of `left`, marked for `status`.
    pub(super) async fn linger_key(&self, key: &str, owner: &str, left: Duration) -> Result<()> {
        let (entries, _) = self.entries(key).await?;
        let holder = self.held_by(&entries, "hold", key, owner)?;
        let granted = self.client.grant(whole_seconds(left)).await?;
        let mut meta = holder.meta.clone();
        meta.token = Some(holder.token());
        meta.holder.held_until_ms = Some(now_ms() + granted.ttl.max(1) as u64 * 1000);
        let value = meta.encode();
        let mut txn = recipe::rewrite(&holder.kv.key, holder.kv.mod_revision, value.clone());
        for op in &mut txn.success {
            if let Some(Request::Put(put)) = &mut op.request {
                put.ignore_lease = false;
                put.lease = granted.id;
            }
        }
        let moved = self.client.txn(txn).await;
        let on_new = |r: &TxnResponse| recipe::written_at(r, &value, granted.id).is_some();
        if !matches!(moved, Ok(ref r) if on_new(r)) {
            let _ = self.client.revoke(granted.id).await;
            moved?;
            return Err(Error::lease_gone("hold", key, &self.name));
        }
        // Best effort: unrevoked, it expires by itself with nothing on it.
        let _ = self.client.revoke(holder.kv.lease).await;
        Ok(())
    }

    /// Returns when a contender's key under one of `keys` is deleted, or after `pause`.
    pub(super) async fn watch_keys(&self, keys: &[String], pause: Duration) -> Result<()> {
        let mut watch = self.client.watch_stream();
        let watching = async {
            for key in keys {
                let dir = self.dir(key);
                let all = RangeRequest {
                    keys_only: true,
                    ..recipe::contenders(&dir, 0)
                };
                let resp = self.client.range(all).await?;
                if !resp.kvs.iter().any(|kv| recipe::contends(&dir, kv)) {
                    return Ok(()); // free already
                }
                let seen = resp.header.as_ref().map_or(0, revision);
                watch.create_prefix(&dir, seen + 1).await?;
            }
            loop {
                if !watch.next().await?.events.is_empty() {
                    return Ok::<(), Error>(());
                }
            }
        };
        match tokio::time::timeout(pause, watching).await {
            Ok(done) => done,
            Err(_) => Ok(()),
        }
    }
}

fn revision(h: &ResponseHeader) -> i64 {
    h.revision
}
