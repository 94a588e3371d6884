//! One server of a Redlock quorum: connected, or down and reconnected in the background;
//! its requests, each within a time limit that tells a slow server from a dead one.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::{join_all, FutureExt};

use super::tuning::RedlockTuning;
use crate::backend::quorum::round::Failure;
use crate::backend::redis::{RedisBackend, Target};
use crate::error::{Error, Result};

/// One server of the quorum: connected, or down and retried now and then.
pub(super) struct Member {
    /// The URL as given (it may carry a password), and what it was read into: to reconnect.
    pub(super) url: String,
    pub(super) target: Target,
    /// The redacted URL, for messages.
    pub(super) shown: String,
    pub(super) tuning: RedlockTuning,
    pub(super) state: Mutex<State>,
}

pub(super) enum State {
    Up(Arc<RedisBackend>),
    Down {
        error: String,
        /// Whether that error may pass (a refused or dropped connection): the requests
        /// this server fails meanwhile are of the same kind, so that the quorum's one rule
        /// ([`crate::backend::quorum::outcome::short_of_majority`]) can tell.
        passing: bool,
        retry_at: Instant,
        connecting: bool,
    },
}

impl State {
    /// A server that could not be connected with `e`, tried again at `retry_at`.
    pub(super) fn down(e: &Error, retry_at: Instant) -> State {
        State::Down {
            error: e.to_string(),
            passing: e.is_retryable(),
            retry_at,
            connecting: false,
        }
    }
}

impl Member {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server's backend, or why it is down. A down server is reconnected in the
    /// background (at most every `reconnect_every`), never on the caller's clock.
    pub(super) fn backend(self: &Arc<Self>) -> Result<Arc<RedisBackend>> {
        let mut state = self.lock();
        match &mut *state {
            State::Up(b) => Ok(b.clone()),
            State::Down {
                error,
                passing,
                retry_at,
                connecting,
            } => {
                if !*connecting && Instant::now() >= *retry_at {
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        *connecting = true;
                        let me = Arc::clone(self);
                        runtime.spawn(async move { me.reconnect().await });
                    }
                }
                Err(match passing {
                    true => Error::Transient(error.clone()),
                    false => Error::Unavailable(error.clone()),
                })
            }
        }
    }

    async fn reconnect(&self) {
        let next =
            match RedisBackend::connect_target(&self.target, &self.url, self.tuning.server).await {
                Ok(b) => State::Up(Arc::new(b)),
                Err(e) => State::down(&e, Instant::now() + self.tuning.reconnect_every),
            };
        *self.lock() = next;
    }

    /// A server that did not answer in time may answer the next request: transient.
    fn timed_out(&self, what: &str, limit: Duration) -> Error {
        Error::Transient(format!(
            "{}: {what}: timed out after {} (server not answering)",
            self.shown,
            humantime::format_duration(limit)
        ))
    }

    /// Runs `op` on this server within `limit`.
    pub(super) async fn call<T, Fut>(
        self: &Arc<Self>,
        what: &str,
        limit: Duration,
        op: impl FnOnce(Arc<RedisBackend>) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        self.call_within(what, limit, op)
            .await
            .map_err(Failure::into_error)
    }

    /// [`Self::call`], telling a server that did not answer within `limit` (busy, or
    /// frozen) from one that is down (not connected, connection refused or reset, or an
    /// error reply).
    pub(super) async fn call_within<T, Fut>(
        self: &Arc<Self>,
        what: &str,
        limit: Duration,
        op: impl FnOnce(Arc<RedisBackend>) -> Fut,
    ) -> Result<T, Failure>
    where
        Fut: Future<Output = Result<T>>,
    {
        let backend = self.backend().map_err(Failure::Down)?;
        let request = async {
            backend.reconnect_detached().await?;
            op(backend).await
        };
        let mut request = std::pin::pin!(request);
        // The limit is looked at first: a process that was not scheduled for longer than
        // the server's own request timeout must not take that timeout for a dead server.
        tokio::select! {
            biased;
            _ = tokio::time::sleep(limit) => {}
            reply = &mut request => return reply.map_err(Failure::Down),
        }
        // A starved process wakes with the timer and the answer due at once: let the
        // connection read what already arrived before calling the server slow.
        tokio::task::yield_now().await;
        match request.now_or_never() {
            Some(Ok(v)) => Ok(v),
            _ => Err(Failure::Slow(self.timed_out(what, limit))),
        }
    }
}

/// Refuses a quorum that names one server twice (`127.0.0.1:P` and `localhost:P`): its
/// vote would count twice. Servers are told apart by their `run_id`; servers that are down
/// or do not tell it are not compared.
pub(super) async fn same_server_twice(members: &[Arc<Member>]) -> Result<()> {
    let ids = join_all(members.iter().map(|m| async move {
        match m.backend() {
            Ok(b) => b.run_id().await,
            Err(_) => None,
        }
    }))
    .await;
    for (i, id) in ids.iter().enumerate() {
        let Some(id) = id else { continue };
        if let Some(j) = ids[..i].iter().position(|other| other.as_ref() == Some(id)) {
            return Err(Error::Usage(format!(
                "{} and {} are the same Redis server (run_id {id}): a Redlock quorum needs independent servers, each named once",
                members[j].shown, members[i].shown
            )));
        }
    }
    Ok(())
}
