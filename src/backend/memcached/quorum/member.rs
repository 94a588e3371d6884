//! One server of a memcached quorum, and its requests, each within a limit that tells
//! a slow (or frozen) server from a dead one.
//!
//! A server that did not answer in time is *suspect* for a while: acquisitions are not
//! sent to it (they could grant unseen), and other requests go out in the background
//! without the caller waiting for them. A frozen server (SIGSTOP, a stalled host) so
//! costs one short timeout, not one per request; any answer clears the suspicion.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::memcached::store::MemcachedStore;
use crate::backend::quorum::round::Failure;
use crate::error::{Error, Result};

/// How long a server that did not answer in time stays suspect.
const SUSPECT_FOR: Duration = Duration::from_secs(2);

/// One server of the quorum.
pub(super) struct Member {
    pub(super) store: Arc<MemcachedStore>,
    /// `memcached://host:port`, for messages.
    pub(super) shown: String,
    suspect_until: Mutex<Option<Instant>>,
}

/// What a request does on a suspect server.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OnSuspect {
    /// Not sent (an acquisition).
    Skip,
    /// Sent in the background; the caller counts it as not answered.
    Background,
}

impl Member {
    pub(super) fn new(store: MemcachedStore) -> Member {
        Member {
            shown: store.name.clone(),
            store: Arc::new(store),
            suspect_until: Mutex::new(None),
        }
    }

    fn suspect(&self) -> bool {
        let until = self
            .suspect_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        until.is_some_and(|t| Instant::now() < t)
    }

    fn mark(&self, answered: bool) {
        let mut until = self
            .suspect_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *until = (!answered).then(|| Instant::now() + SUSPECT_FOR);
    }

    /// Runs `op` on this server within `limit` (see the module documentation for a
    /// suspect server).
    pub(super) async fn call<T, Fut>(
        self: &Arc<Self>,
        what: &str,
        limit: Duration,
        on_suspect: OnSuspect,
        op: impl FnOnce(Arc<MemcachedStore>) -> Fut,
    ) -> Result<T, Failure>
    where
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        if self.suspect() {
            if on_suspect == OnSuspect::Background {
                let request = op(self.store.clone());
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    if request.await.is_ok() {
                        me.mark(true);
                    }
                });
            }
            // Silent a moment ago, it may answer the next request: transient.
            return Err(Failure::Down(Error::Transient(format!(
                "{}: {what}: not answering (it timed out within the last {})",
                self.shown,
                humantime::format_duration(SUSPECT_FOR)
            ))));
        }
        match tokio::time::timeout(limit, op(self.store.clone())).await {
            Ok(reply) => {
                self.mark(true);
                reply.map_err(Failure::Down)
            }
            Err(_) => {
                self.mark(false);
                Err(Failure::Slow(Error::Transient(format!(
                    "{}: {what}: timed out after {} (server not answering)",
                    self.shown,
                    humantime::format_duration(limit)
                ))))
            }
        }
    }

    /// [`Self::call`], with one error whatever the failure.
    pub(super) async fn ask<T, Fut>(
        self: &Arc<Self>,
        what: &str,
        limit: Duration,
        op: impl FnOnce(Arc<MemcachedStore>) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.call(what, limit, OnSuspect::Background, op)
            .await
            .map_err(Failure::into_error)
    }
}
