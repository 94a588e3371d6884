//! The backend value: where the server is, and the one shared connection every request
//! goes out on, reopened when it broke, with a timeout on every request.

use std::future::Future;
use std::sync::{Arc, Mutex};

use redis::aio::PubSub;
use redis::{Client, Cmd, Value};

use super::conn::Conn;
use super::connect::{tls_from_env, Endpoint, Server, Tuning};
use super::keys::Keys;
use super::scripts::{run_script, Lua};
use super::url::{Layout, MinReplicas, Target};
use crate::backend::url::redact as redact_url;
use crate::backend::{install_crypto_provider, RUN_RECORD_TTL};
use crate::error::{Error, Result};

/// Locks kept in one Redis server.
pub struct RedisBackend {
    endpoint: Endpoint,
    /// The shared multiplexed connection; `None` after it broke, reopened on next use.
    conn: Mutex<Option<Conn>>,
    pub(super) server: Server,
    /// `?min_replicas`: replicas that must acknowledge each grant and renewal.
    pub(super) min_replicas: Option<MinReplicas>,
    /// `?layout=`: a server of a Redlock quorum keeps its locks in the plain layout when
    /// its URL says so (on one server, [`PlainBackend`](super::PlainBackend) does).
    pub(super) layout: Layout,
    /// The run kept for the release that follows it (see `runs.rs`).
    pub(super) kept: Mutex<Option<KeptRun>>,
}

impl RedisBackend {
    /// Connects to the server at `url` with the default [`Tuning`].
    pub async fn connect(url: &str) -> Result<RedisBackend> {
        Self::connect_with(url, Tuning::default()).await
    }

    /// Connects to the server at `url`, failing fast (`Unavailable`) when it cannot be
    /// reached or refuses our credentials.
    pub async fn connect_with(url: &str, tuning: Tuning) -> Result<RedisBackend> {
        let target = super::url::parse(url, std::env::var(crate::env::REDIS_AUTH).ok())?;
        Self::connect_target(&target, url, tuning).await
    }

    /// [`Self::connect_with`] the server `target` (read from `url`) names.
    pub(crate) async fn connect_target(
        target: &Target,
        url: &str,
        tuning: Tuning,
    ) -> Result<RedisBackend> {
        install_crypto_provider();
        let (endpoint, secrets) = Endpoint::new(target, url, tls_from_env()?)?;
        let server = Server {
            url: redact_url(url),
            secrets,
            tuning,
            fails_over: !matches!(endpoint, Endpoint::Direct(_)),
        };
        let conn = endpoint.open(&server).await?;
        let backend = RedisBackend {
            endpoint,
            conn: Mutex::new(Some(conn)),
            server,
            min_replicas: target.min_replicas,
            layout: target.layout,
            kept: Mutex::new(None),
        };
        // No PING and no SCRIPT LOAD here: each costs a round trip on every `dlock` run.
        // A wrong password already failed in `open` (AUTH is part of the handshake), a
        // missing one fails the first script call with NOAUTH, and scripts are sent by
        // `EVALSHA`, falling back to `EVAL` once per server when it does not know them.
        Ok(backend)
    }

    /// True when this server keeps the application's canonical lock on K itself
    /// (`?layout=plain`): Redlock's requests go to the plain scripts then.
    pub(super) fn plain(&self) -> bool {
        self.layout == Layout::Plain
    }

    /// The shared connection, reopened if it broke.
    pub(super) async fn conn(&self) -> Result<Conn> {
        if let Some(conn) = self.lock_conn().clone() {
            return Ok(conn);
        }
        let conn = self.endpoint.open(&self.server).await?;
        *self.lock_conn() = Some(conn.clone());
        Ok(conn)
    }

    /// Reopens the connection if it broke, in a task of its own, so that a caller's short
    /// timeout (Redlock's per-server timeouts) cannot cancel a slow reconnection (a TLS
    /// handshake, a Sentinel lookup) halfway, again and again: it completes in the
    /// background and the next call finds it done.
    pub(crate) async fn reconnect_detached(self: &Arc<Self>) -> Result<()> {
        if self.lock_conn().is_some() {
            return Ok(());
        }
        let me = Arc::clone(self);
        tokio::spawn(async move { me.conn().await.map(|_| ()) })
            .await
            .map_err(|e| Error::Internal(format!("{}: reconnecting: {e}", self.server.url)))?
    }

    /// The client of the server (for Sentinel, of the master last found).
    pub(super) async fn client(&self) -> Result<Client> {
        self.endpoint.client(&self.server, false).await
    }

    /// A connection of its own, beside the shared one (a waiter blocks on it).
    pub(super) async fn open_own(&self) -> Result<Conn> {
        self.endpoint.open(&self.server).await
    }

    /// Drops the shared connection: the next request opens another.
    pub(super) fn forget_conn(&self) {
        *self.lock_conn() = None;
    }

    /// True while the shared connection is open.
    pub(super) fn has_conn(&self) -> bool {
        self.lock_conn().is_some()
    }

    fn lock_conn(&self) -> std::sync::MutexGuard<'_, Option<Conn>> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one request with the operation timeout; a broken connection is dropped so that
    /// the next request reconnects (e.g. after a server restart), and so is one that met a
    /// failover (the next request looks the master, or the slot map, up again).
    pub(super) async fn call<T>(
        &self,
        what: &str,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        self.call_with(|| what.to_string(), request).await
    }

    /// [`Self::call`] with the failure's description made only when it fails: the hot
    /// paths format nothing per call.
    pub(super) async fn call_with<T>(
        &self,
        what: impl FnOnce() -> String,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let limit = self.server.tuning.op_timeout;
        self.call_limited(limit, what, request).await
    }

    /// [`Self::call_with`] within `limit` instead of the operation timeout (a `WAIT`).
    pub(super) async fn call_limited<T>(
        &self,
        limit: std::time::Duration,
        what: impl FnOnce() -> String,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let (error, broken) = match tokio::time::timeout(limit, request).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => {
                let broken = e.is_unrecoverable_error() || e.is_connection_dropped();
                (self.server.unavailable(&what(), &e), broken)
            }
            Err(_) => (self.server.timed_out(&what(), limit), false),
        };
        if broken || error.is_retryable() {
            *self.lock_conn() = None;
        }
        Err(error)
    }

    /// Runs `cmd`, an `EVALSHA` of `script` (see [`evalsha`]), and returns its raw reply;
    /// on `NOSCRIPT` the script is loaded and the call made again, once.
    pub(super) async fn eval(
        &self,
        what: impl FnOnce() -> String,
        script: &Lua,
        cmd: &Cmd,
    ) -> Result<Value> {
        let mut conn = self.conn().await?;
        self.call_with(what, run_script(&mut conn, script, cmd))
            .await
    }

    /// Redlock: the server's `run_id` (`INFO server`), which tells two names of one server
    /// from two servers; `None` when the server does not tell (an ACL without `INFO`).
    pub(crate) async fn run_id(&self) -> Option<String> {
        let mut conn = self.conn().await.ok()?;
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let text: String = self
            .call(
                "cannot read the server's run id",
                info.query_async(&mut conn),
            )
            .await
            .ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("run_id:"))
            .map(|id| id.trim().to_string())
            .filter(|id| !id.is_empty())
    }

    /// Redlock: a pub/sub connection subscribed to the channel every release of `key` is
    /// published on.
    pub(crate) async fn subscribe_released(&self, key: &str) -> Result<PubSub> {
        let what = format!("cannot wait for lock '{key}'");
        self.subscribe_to(&Keys::new(key).released, &what).await
    }

    /// Opens a pub/sub connection subscribed to `channel`.
    pub(super) async fn subscribe_to(&self, channel: &str, what: &str) -> Result<PubSub> {
        let tuning = &self.server.tuning;
        let client = self.client().await?;
        let connecting = client.get_async_pubsub();
        let mut pubsub = self
            .server
            .within(tuning.connect_timeout, what, connecting)
            .await?;
        self.server
            .within(tuning.op_timeout, what, pubsub.subscribe(channel))
            .await?;
        Ok(pubsub)
    }
}

/// A run kept for the release of its lock, which writes it (see `runs.rs`).
pub(crate) struct KeptRun {
    pub(super) key: String,
    pub(super) owner: String,
    /// The encoded record.
    pub(super) value: String,
    pub(super) succeeded: bool,
}

impl KeptRun {
    /// The release script's last arguments: the record, its TTL, whether it succeeded.
    pub(super) fn args(kept: Option<&KeptRun>) -> (&str, u64, &str) {
        let ttl = RUN_RECORD_TTL.as_millis() as u64;
        match kept {
            Some(k) => (&k.value, ttl, if k.succeeded { "1" } else { "" }),
            None => ("", ttl, ""),
        }
    }
}
