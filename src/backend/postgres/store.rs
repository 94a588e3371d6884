//! PostgreSQL as a [`LockStore`]: the waiting loop drives the primitives of the other
//! parts; waiters and watchers sleep on LISTEN/NOTIFY.
//!
//! A waiter LISTENs to a channel of its own before its first attempt, so a release
//! committed after that attempt read the key cannot go unnoticed. A release (and a waiter
//! leaving a free key, or a new shared holder) wakes only the head of the key's queue, on
//! its channel (see `schema.rs`): the one waiter that may be admitted looks again, the
//! others sleep on without a query, so a hand-off costs the same however many wait.
//! Watchers (`dlock wait`) LISTEN to the table's channel instead, where releases say
//! `R:key` and grants `T:key`. An expiry sends nothing: waiters look again when the lease
//! they saw may have expired (the loop's retry), and at least every heartbeat, which also
//! keeps their place alive.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;
use tokio::time::Instant;

use super::backend::PostgresStore;
use super::connect::Note;
use super::row::PgWaiter;
use super::schema::waiter_payload;
use crate::backend::store::{Attempt, Busy, LockStore, Woken};
use crate::backend::{
    AcquireRequest, Acquired, KeyStatus, LastRuns, Lease, ReleaseMode, Released, RunRecord,
    Sharing, WATCH_POLL,
};
use crate::error::Result;

/// True when `note` concerns one of `keys`; `released_only` ignores grants.
fn concerns(note: &str, keys: &[String], released_only: bool) -> bool {
    let (kind, key) = note.split_once(':').unwrap_or(("", note));
    if kind == "W" || (released_only && kind != "R") {
        return false;
    }
    key.is_empty() || keys.iter().any(|k| k == key)
}

/// Waits until a note that `wanted` accepts comes, or `until`; false when the channel is
/// gone.
async fn await_note(
    rx: &mut Receiver<Note>,
    wanted: impl Fn(&str) -> bool,
    until: Instant,
) -> bool {
    loop {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Err(_) => return true,
            Ok(Ok(note)) if wanted(&note) => return true,
            Ok(Ok(_)) => continue,
            Ok(Err(RecvError::Lagged(_))) => return true,
            Ok(Err(RecvError::Closed)) => return false,
        }
    }
}

#[async_trait]
impl LockStore for PostgresStore {
    type Waiter = PgWaiter;

    fn describe(&self) -> String {
        self.server.target.name.clone()
    }

    /// Every mode: shared and semaphore holders live in the key's row as a group.
    fn supports(&self, _sharing: Sharing) -> bool {
        true
    }

    /// The queue is ordered by priority, then arrival (`NEXT` in `schema.rs`), and keeps
    /// one pending superseding waiter (`supersede` there).
    fn queue_order(&self) -> Option<&'static str> {
        None
    }

    async fn begin(&self, _req: &AcquireRequest) -> Result<PgWaiter> {
        let id = crate::ids::new_owner_id();
        // Not listening (the server is failing), a waiter still looks again every heartbeat.
        let listening = self.listen_as(&id).await.is_ok();
        Ok(PgWaiter {
            id,
            notes: listening.then(|| self.notes.subscribe()),
            ended: self.ended.clone(),
        })
    }

    async fn attempt(
        &self,
        req: &AcquireRequest,
        w: &mut PgWaiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        self.attempt_as(req, w, enqueue)
            .await
            .map_err(|e| self.server.naming(&req.key, e))
    }

    async fn sleep(
        &self,
        _req: &AcquireRequest,
        w: &mut PgWaiter,
        _busy: &Busy,
        pause: Duration,
        round: u32,
    ) -> Result<Woken> {
        if w.notes.is_none() || !self.listening_as(&w.id).await {
            // Reopened: what it missed meanwhile is found by looking again at once.
            if self.listen_as(&w.id).await.is_ok() {
                w.notes = Some(self.notes.subscribe());
                return Ok(Woken::Again);
            }
            w.notes = None;
            let pause = crate::backend::waiting::backoff(round).min(pause);
            tokio::time::sleep(pause).await;
            return Ok(Woken::Again);
        }
        let rx = w.notes.as_mut().expect("checked above");
        let mine = waiter_payload(&w.id);
        if !await_note(rx, |note| note == mine, Instant::now() + pause).await {
            w.notes = None;
        }
        Ok(Woken::Again)
    }

    async fn leave(&self, req: &AcquireRequest, w: PgWaiter) {
        let _ = self.leave_queue(&req.key, &w.id, &req.owner).await;
        if !req.sharing.is_exclusive() {
            // A membership granted to `req.owner` whose answer never arrived goes too.
            let _ = self.leave_group(&req.key, &req.owner).await;
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        self.renew_lease(key, owner, ttl)
            .await
            .map_err(|e| self.server.naming(key, e))
    }

    async fn linger(&self, acquired: Acquired, left: Duration) -> Result<()> {
        let lease = &acquired.lease;
        self.linger_lease(&lease.key, &lease.owner, left)
            .await
            .map_err(|e| self.server.naming(&lease.key, e))
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        self.release_lease(key, owner, mode)
            .await
            .map_err(|e| self.server.naming(key, e))
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        self.read_status(keys).await
    }

    fn heartbeat(&self) -> Duration {
        self.server.tuning.heartbeat
    }

    /// Returns on a release or grant of one of `keys`, or after `pause` (at most a
    /// heartbeat: an expiry is not notified). The subscription is kept between calls; the
    /// first call (or one after the connection was reopened) looks once after it LISTENs,
    /// as Redis's watch does, and returns at once only when a key is free by then: a
    /// release between the caller's last look and the LISTEN sent no note we heard.
    async fn watch(&self, keys: &[String], pause: Duration) -> Result<()> {
        let mut watcher = self.watcher.lock().await;
        if watcher.is_none() || !self.listening().await {
            *watcher = None;
            if self.listen().await.is_err() {
                tokio::time::sleep(pause.min(WATCH_POLL)).await;
                return Ok(());
            }
            let rx = self.notes.subscribe();
            let looked = self.read_status(keys).await;
            *watcher = Some(rx);
            if looked.map_or(true, |st| st.iter().any(|s| s.lock.is_none())) {
                return Ok(());
            }
        }
        let rx = watcher.as_mut().expect("checked above");
        let until = Instant::now() + pause.min(self.server.tuning.heartbeat);
        if !await_note(rx, |note| concerns(note, keys, false), until).await {
            *watcher = None;
        }
        Ok(())
    }

    async fn record_run(&self, key: &str, run: &RunRecord) -> Result<()> {
        // The caller's warning names the key and the server already.
        self.write_run(key, run).await
    }

    async fn last_runs(&self, key: &str) -> Result<LastRuns> {
        self.read_runs(key)
            .await
            .map_err(|e| self.server.naming(key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::concerns;

    #[test]
    fn notes() {
        let keys = ["a".to_string(), "b:c".to_string()];
        assert!(concerns("R:a", &keys, true));
        assert!(concerns("R:b:c", &keys, true));
        assert!(!concerns("T:a", &keys, true));
        assert!(concerns("T:a", &keys, false));
        assert!(!concerns("R:x", &keys, false));
        assert!(concerns("R:", &keys, true));
        assert!(!concerns("W:a", &keys, false));
    }
}
