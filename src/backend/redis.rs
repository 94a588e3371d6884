//! The Redis backend: one server, atomic Lua scripts, FIFO waiters woken one at a time.
//!
//! # Key layout
//!
//! For lock key `K`; the hash tag `{K}` puts every key of one lock in one Redis Cluster slot,
//! so each script touches a single slot.
//!
//! | key | type | content |
//! |---|---|---|
//! | `dlock:{K}:lease` | HASH | owner, token, depth, holder (JSON `[host, pid, user, command, requested_ms]`), acquired_ms; `PEXPIRE` = TTL |
//! | `dlock:{K}:fence` | STRING | fencing counter, `INCR`ed on every fresh grant; never deleted, never expires |
//! | `dlock:{K}:queue` | ZSET | waiter id → arrival ticket (last ticket + 1): the FIFO line |
//! | `dlock:{K}:alive` | ZSET | waiter id → liveness deadline (server ms), refreshed by each poll |
//! | `dlock:{K}:info` | HASH | waiter id → the waiter's [`Holder`] as the same JSON array, for `status` |
//!
//! | `dlock:{K}:wake:<waiter id>` | LIST | a pending wake-up of that fair waiter (expires after 60 s) |
//! | `dlock:{K}:unfair` | STRING | set (for twice the liveness window) by every refused unfair attempt: a release publishes on the released channel only while it exists |
//!
//! The three queue keys get a TTL of twice the liveness window on every refresh, so they
//! vanish on their own when every waiter has died. The channel `dlock:{K}:released` wakes
//! unfair waiters.
//!
//! # Algorithm
//!
//! * acquire, renew, release and leave are each one Lua script (`EVALSHA`, falling back to
//!   `EVAL` on `NOSCRIPT`, which happens once per server: each call is one round trip,
//!   and connecting sends nothing but the handshake). Scripts
//!   read the server's `TIME`, so all clients share one clock.
//! * acquire: if one of the caller's `reenter` owners holds the lease, the depth goes up.
//!   Otherwise dead waiters are pruned (liveness deadline passed), and the lease is granted
//!   when it is free and, if fair, the queue is empty or the caller is its head. If not, a
//!   fair caller joins the queue (or refreshes its liveness there) and learns its position.
//!   A `--no-wait` attempt never joins, and still cannot overtake a live queue.
//! * Waiting, fair: after a refusal the waiter blocks in `BLPOP` on its own wake list, on
//!   the connection it already has (one connection per process, no subscription). A
//!   release (and a waiter leaving a free lock) prunes the dead and pushes one element to
//!   the live head's list only: no thundering herd; a push that comes before the `BLPOP`
//!   waits in the list, so none is missed. The next acquire attempt is pipelined behind
//!   the `BLPOP`, so the server runs it the moment the waiter is woken: a hand-off costs
//!   no client round trip. The `BLPOP` times out when the lease or a stale head may have
//!   expired, or after at most one heartbeat; every attempt refreshes the waiter's
//!   liveness. An attempt whose reply was never read (the wait was given up meanwhile) may
//!   have been granted: the next attempt of the same owner claims that lease, and leaving
//!   the queue releases it.
//! * Waiting, unfair (`--no-fair`): the waiter subscribes to the released channel on a
//!   separate pub/sub connection and tries again at once, so no release can slip between
//!   the refusal and the subscription, then sleeps until a message or the same timeouts.
//! * Cancel, timeout, or an error leave the queue (a dropped future leaves it from a spawned
//!   task); a waiter killed outright drops out when its liveness deadline passes.
//! * renew only extends (`PEXPIRE max(PTTL, ttl)`): a nested holder with a shorter TTL
//!   must not cut short the lease its parent's renewal schedule relies on.
//! * release deletes at depth 0 (or at once with `All`/`Force`) and wakes the head.
//! * status with no key: `SCAN MATCH` (never `KEYS`) finds leases and queues in one pass,
//!   and the leases are read by `HMGET` + `PTTL` pipelines while the scan goes on.
//! * Leases live by TTL only: `detached` makes no difference here. A connection that broke
//!   is reopened on the next call; every request has a timeout. The key layout is ready for
//!   Redis Cluster, but the client talks to one node.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSub};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    FromRedisValue, IntoConnectionInfo, RedisError, ServerErrorKind, TlsCertificates, TlsMode,
    Value,
};
use tokio_util::sync::CancellationToken;

use super::{
    unless_cancelled, AcquireRequest, Acquired, Backend, Holder, KeyStatus, Lease, LockInfo,
    ReleaseMode, Released, WaitInfo, WaitOptions, WaiterInfo, CANCEL_GRACE,
};
use crate::config::{is_sentinel_url, parse_sentinel_url, redact_url};
use crate::error::{Error, Result};

/// Read for a password when the URL has none, as `redis-cli` does.
pub const AUTH_ENV: &str = "REDISCLI_AUTH";
/// A PEM file of CA certificates to trust for `rediss://` instead of the system roots.
pub const TLS_CA_ENV: &str = "DLOCK_TLS_CA";
/// A PEM client certificate (chain) for mutual TLS; needs [`TLS_KEY_ENV`].
pub const TLS_CERT_ENV: &str = "DLOCK_TLS_CERT";
/// The PEM private key of [`TLS_CERT_ENV`].
pub const TLS_KEY_ENV: &str = "DLOCK_TLS_KEY";
/// The password of the Sentinels themselves (`redis+sentinel://`), when they require one;
/// the URL's credentials are for the master.
pub const SENTINEL_PASSWORD_ENV: &str = "DLOCK_SENTINEL_PASSWORD";

/// A Lua script as sent: `common.lua` in front of its own file, and the SHA1 that
/// `build.rs` computed from the same text (hashing at run time would add to the start-up of
/// every `dlock` run; figures: README, *Benchmarks*).
struct Lua {
    body: &'static str,
    sha: &'static str,
}

macro_rules! lua {
    ($file:literal, $sha:literal) => {
        Lua {
            body: concat!(
                include_str!("redis/common.lua"),
                "\n",
                include_str!(concat!("redis/", $file))
            ),
            sha: env!($sha),
        }
    };
}

impl Lua {
    /// `SCRIPT LOAD`s the body, for a server that answered `NOSCRIPT`.
    async fn load(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.body);
        cmd.query_async::<String>(conn).await.map(drop)
    }
}

/// Runs `cmd`, an `EVALSHA` of `script` (see [`evalsha`]); on `NOSCRIPT` the script is
/// loaded and the call made again, once.
async fn run_script(
    conn: &mut MultiplexedConnection,
    script: &Lua,
    cmd: &Cmd,
) -> redis::RedisResult<Value> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load(conn).await?;
            cmd.query_async(conn).await
        }
        reply => reply,
    }
}

/// The lease hash fields read back, in this order (see [`lock_info`]). The holder's host,
/// pid, user and command travel as one JSON field: a grant stores 5 fields, not 8.
const LEASE_FIELDS: [&str; 5] = ["owner", "token", "depth", "holder", "acquired_ms"];

/// One SCAN finds both `dlock:{K}:lease` and `dlock:{K}:queue`, and no other key of ours,
/// so listing walks the keyspace once.
const SCAN_PATTERN: &str = "dlock:*:[lq][eu][ae][su]e";
/// Keys asked per SCAN call: large, so 100,000 locks take few round trips.
const SCAN_COUNT: u64 = 10_000;
/// Locks read per status pipeline.
const STATUS_CHUNK: usize = 2000;

/// Timing knobs. The defaults suit production; tests shrink them.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Longest wait to connect (TCP, TLS, authentication).
    pub connect_timeout: Duration,
    /// Longest wait for any one request: a paused server must not hang us.
    pub op_timeout: Duration,
    /// A waiter looks again (and refreshes its place in the queue) at least this often.
    pub heartbeat: Duration,
    /// A waiter that has not refreshed its place for this long is dropped from the queue.
    pub liveness: Duration,
    /// Nothing else uses this backend while an `acquire` waits (the CLI: one request at a
    /// time). A fair waiter then blocks on the shared connection instead of opening one
    /// of its own: one connection per `dlock` process.
    pub exclusive: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            connect_timeout: Duration::from_secs(2),
            op_timeout: Duration::from_secs(3),
            heartbeat: Duration::from_secs(1),
            liveness: Duration::from_secs(4),
            exclusive: false,
        }
    }
}

/// Parses a `redis://` or `rediss://` URL; when it carries no password, `env_password`
/// (the value of [`AUTH_ENV`]) is used. Pure, so it is testable without touching the
/// process environment.
pub fn connection_info(url: &str, env_password: Option<String>) -> Result<ConnectionInfo> {
    let info = url
        .into_connection_info()
        .map_err(|e| Error::Usage(format!("invalid Redis URL {}: {e}", redact_url(url))))?;
    let has_password = info
        .redis_settings()
        .password()
        .is_some_and(|p| !p.is_empty());
    match env_password.filter(|p| !p.is_empty()) {
        Some(password) if !has_password => {
            let settings = info.redis_settings().clone().set_password(password);
            Ok(info.set_redis_settings(settings))
        }
        _ => Ok(info),
    }
}

/// The TLS material named by [`TLS_CA_ENV`], [`TLS_CERT_ENV`] and [`TLS_KEY_ENV`] (paths to
/// PEM files), or `None` when none is set. A certificate needs its key and the other way round.
pub fn tls_certificates(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<TlsCertificates>> {
    let read = |var: &str, path: &Path| {
        std::fs::read(path)
            .map_err(|e| Error::Usage(format!("cannot read {var} file {}: {e}", path.display())))
    };
    let client_tls = match (cert, key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read(TLS_CERT_ENV, cert)?,
            client_key: read(TLS_KEY_ENV, key)?,
        }),
        (None, None) => None,
        _ => {
            return Err(Error::Usage(format!(
                "{TLS_CERT_ENV} and {TLS_KEY_ENV} go together: set both for a client certificate, or neither"
            )))
        }
    };
    let root_cert = ca.map(|ca| read(TLS_CA_ENV, ca)).transpose()?;
    if client_tls.is_none() && root_cert.is_none() {
        return Ok(None);
    }
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// [`tls_certificates`] from the environment.
fn tls_from_env() -> Result<Option<TlsCertificates>> {
    let path = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let (ca, cert, key) = (path(TLS_CA_ENV), path(TLS_CERT_ENV), path(TLS_KEY_ENV));
    tls_certificates(ca.as_deref(), cert.as_deref(), key.as_deref())
}

/// Where the server is: one address, or the master a set of Sentinels names.
enum Endpoint {
    Direct(Client),
    Sentinel {
        sentinels: Box<tokio::sync::Mutex<SentinelClient>>,
        /// The master found last; looked up again whenever the connection is reopened.
        master: Mutex<Option<Client>>,
    },
}

impl Endpoint {
    /// The endpoint of `url`, and every secret it carries (to scrub from messages).
    fn new(
        url: &str,
        env_password: Option<String>,
        tls: Option<TlsCertificates>,
    ) -> Result<(Endpoint, Vec<String>)> {
        let env_password = env_password.filter(|p| !p.is_empty());
        if !is_sentinel_url(url) {
            let info = connection_info(url, env_password)?;
            // No `CLIENT SETINFO` (the client library's name and version) on connecting: it
            // is a round trip of its own on every connection (the pub/sub one included)
            // when there is no AUTH to send it with, and servers before 7.2 reject it anyway.
            let settings = info.redis_settings().clone().set_skip_set_lib_name();
            let info = info.set_redis_settings(settings);
            let secrets = info.redis_settings().password().map(String::from);
            let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
            let built = match tls {
                Some(certs) if is_tls => Client::build_with_tls(info, certs),
                _ => Client::open(info),
            };
            let client = built
                .map_err(|e| Error::Usage(format!("invalid Redis URL {}: {e}", redact_url(url))))?;
            return Ok((Endpoint::Direct(client), secrets.into_iter().collect()));
        }
        let parsed = parse_sentinel_url(url)?;
        let sentinel_password = std::env::var(SENTINEL_PASSWORD_ENV)
            .ok()
            .filter(|p| !p.is_empty());
        let password = parsed.password.clone().or(env_password);
        let nodes = parsed.nodes.iter().map(|(host, port)| {
            if parsed.tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: parsed.insecure,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let invalid =
            |e: RedisError| Error::Usage(format!("invalid Sentinel URL {}: {e}", redact_url(url)));
        let mut builder =
            SentinelClientBuilder::new(nodes, &parsed.service, SentinelServerType::Master)
                .map_err(invalid)?
                .set_client_to_redis_db(parsed.db);
        if let Some(user) = &parsed.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(password) = &sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if parsed.tls {
            let mode = if parsed.insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            };
            builder = builder
                .set_client_to_redis_tls_mode(mode)
                .set_client_to_sentinel_tls_mode(mode);
            if let Some(certs) = tls {
                builder = builder
                    .set_client_to_redis_certificates(certs.clone())
                    .set_client_to_sentinel_certificates(certs);
            }
        }
        let sentinels = builder.build().map_err(invalid)?;
        let endpoint = Endpoint::Sentinel {
            sentinels: Box::new(tokio::sync::Mutex::new(sentinels)),
            master: Mutex::new(None),
        };
        let secrets = password.into_iter().chain(sentinel_password).collect();
        Ok((endpoint, secrets))
    }

    /// The client to connect with; for Sentinel, the master is looked up again when
    /// `fresh` (a connection is being (re)opened) or not known yet.
    async fn client(&self, server: &Server, fresh: bool) -> Result<Client> {
        match self {
            Endpoint::Direct(client) => Ok(client.clone()),
            Endpoint::Sentinel { sentinels, master } => {
                let lock =
                    |m: &Mutex<Option<Client>>| m.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some(client) = lock(master).filter(|_| !fresh) {
                    return Ok(client);
                }
                let mut sentinels = sentinels.lock().await;
                let found = server
                    .within(
                        server.tuning.connect_timeout,
                        "cannot find the master through Sentinel",
                        sentinels.async_get_client(),
                    )
                    .await?;
                *master.lock().unwrap_or_else(|p| p.into_inner()) = Some(found.clone());
                Ok(found)
            }
        }
    }
}

/// True when the server refused a request because we sent no password. Redis says so in
/// several ways: `NOAUTH` for a short command, "Protocol error: unauthenticated multibulk
/// length" (and a closed connection) for a long one such as a script call, "Authentication
/// required" when the handshake selects a database.
fn needs_password(e: &RedisError) -> bool {
    if e.code() == Some("NOAUTH") {
        return true;
    }
    let text = e.to_string().to_ascii_lowercase();
    ["noauth", "unauthenticated", "authentication required"]
        .iter()
        .any(|s| text.contains(s))
}

/// rustls 0.23 needs a process-wide crypto provider before any TLS connection.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Fails only when another part of the program installed one first: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The server as named in messages, and how long we wait for it.
#[derive(Clone)]
struct Server {
    /// The redacted URL.
    url: String,
    /// The passwords, scrubbed from any message as a last line of defence.
    secrets: Vec<String>,
    tuning: Tuning,
}

impl Server {
    /// One line naming what failed and the server, never the password.
    fn line(&self, msg: String) -> String {
        let mut msg = msg.replace(['\r', '\n'], " ");
        for secret in self.secrets.iter().filter(|s| !s.is_empty()) {
            msg = msg.replace(secret.as_str(), "***");
        }
        msg
    }

    fn unavailable(&self, what: &str, e: &RedisError) -> Error {
        if needs_password(e) {
            return Error::Unavailable(self.line(format!(
                "{}: {what}: authentication required: the server wants a password (give it \
                 in the URL or in {AUTH_ENV})",
                self.url
            )));
        }
        Error::Unavailable(self.line(format!("{}: {what}: {e}", self.url)))
    }

    fn timed_out(&self, what: &str, limit: Duration) -> Error {
        Error::Unavailable(self.line(format!(
            "{}: {what}: timed out after {} (server not answering)",
            self.url,
            humantime::format_duration(limit)
        )))
    }

    /// Runs one request within `limit`, mapping every failure to `Unavailable`.
    async fn within<T>(
        &self,
        limit: Duration,
        what: &str,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(limit, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unavailable(what, &e)),
            Err(_) => Err(self.timed_out(what, limit)),
        }
    }

    /// Opens a multiplexed connection.
    async fn open(&self, client: &Client) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.tuning.connect_timeout))
            .set_response_timeout(None); // we time every request ourselves
        let connecting = client.get_multiplexed_async_connection_with_config(&config);
        self.within(self.tuning.connect_timeout, "cannot connect", connecting)
            .await
    }
}

/// The scripts, each sent by SHA (`EVALSHA`) and only in full when the server lacks it.
struct Scripts {
    acquire: Lua,
    renew: Lua,
    release: Lua,
    leave: Lua,
    fence: Lua,
}

/// Text and hash are both fixed at build time: one static serves every connection.
static SCRIPTS: Scripts = Scripts {
    acquire: lua!("acquire.lua", "DLOCK_LUA_SHA_ACQUIRE"),
    renew: lua!("renew.lua", "DLOCK_LUA_SHA_RENEW"),
    release: lua!("release.lua", "DLOCK_LUA_SHA_RELEASE"),
    leave: lua!("leave.lua", "DLOCK_LUA_SHA_LEAVE"),
    fence: lua!("fence.lua", "DLOCK_LUA_SHA_FENCE"),
};

/// The Redis names of one lock's keys and channels.
#[derive(Debug, Clone)]
struct Keys {
    lease: String,
    fence: String,
    queue: String,
    alive: String,
    info: String,
    wake_prefix: String,
    released: String,
    unfair: String,
}

impl Keys {
    fn new(key: &str) -> Keys {
        Keys {
            lease: key_name(key, ":lease"),
            fence: key_name(key, ":fence"),
            queue: key_name(key, ":queue"),
            alive: key_name(key, ":alive"),
            info: key_name(key, ":info"),
            wake_prefix: key_name(key, ":wake:"),
            released: key_name(key, ":released"),
            unfair: key_name(key, ":unfair"),
        }
    }
}

/// The lock key `K` of a Redis key `dlock:{K}<suffix>`, e.g. suffix `:lease`.
fn lock_name<'a>(redis_key: &'a str, suffix: &str) -> Option<&'a str> {
    redis_key
        .strip_prefix("dlock:{")?
        .strip_suffix(suffix)?
        .strip_suffix('}')
}

/// The lease key of lock `key` (see [`Keys`]; cheaper when listing many locks).
fn lease_key(key: &str) -> String {
    key_name(key, ":lease")
}

/// `dlock:{K}<suffix>`, built in one allocation of the exact size (this runs several
/// times per acquire and release; `format!` costs more).
fn key_name(key: &str, suffix: &str) -> String {
    const PREFIX: &str = "dlock:{";
    let mut name = String::with_capacity(PREFIX.len() + key.len() + 1 + suffix.len());
    name.push_str(PREFIX);
    name.push_str(key);
    name.push('}');
    name.push_str(suffix);
    name
}

/// An `EVALSHA` of `script` on `keys`, to which the caller adds `args` arguments. Built
/// straight into one command buffer: a `ScriptInvocation` copies every key and argument
/// into a vector of its own first, a dozen allocations per call on the hot path.
fn evalsha(script: &Lua, keys: &[&str], args: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + keys.len() + args, 256);
    cmd.arg("EVALSHA").arg(script.sha).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// Milliseconds for a script argument; at least 1, as Redis rejects a zero expiry.
fn millis(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}

/// A script or pipeline reply, read front to back.
struct Reply<'a> {
    items: std::vec::IntoIter<Value>,
    url: &'a str,
}

impl<'a> Reply<'a> {
    fn new(reply: Value, url: &'a str) -> Result<Reply<'a>> {
        match reply {
            Value::Array(items) => Ok(Reply {
                items: items.into_iter(),
                url,
            }),
            other => Err(Error::Internal(format!(
                "unexpected reply from {url}: {other:?}"
            ))),
        }
    }

    fn next<T: FromRedisValue>(&mut self) -> Result<T> {
        let value = self.items.next().unwrap_or(Value::Nil);
        redis::from_redis_value(value)
            .map_err(|e| Error::Internal(format!("unexpected reply from {}: {e}", self.url)))
    }

    /// The lease fields that follow (see [`LEASE_FIELDS`]).
    fn lease_fields(&mut self) -> Result<Vec<Option<String>>> {
        (0..LEASE_FIELDS.len()).map(|_| self.next()).collect()
    }
}

/// A lock's state from its lease fields (in [`LEASE_FIELDS`] order) and PTTL; `None` when
/// free.
fn lock_info(key: &str, fields: Vec<Option<String>>, pttl: i64) -> Option<LockInfo> {
    let [owner, token, depth, holder, acquired]: [Option<String>; 5] = fields.try_into().ok()?;
    let num = |s: Option<String>| s.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let holder = holder.as_deref().and_then(parse_holder);
    Some(LockInfo {
        key: key.to_string(),
        owner: owner?,
        fencing_token: num(token),
        depth: num(depth) as u32,
        holder: Holder {
            acquired_at_ms: num(acquired), // the holder's clock at the grant
            ..holder.unwrap_or_default()
        },
        ttl_left_ms: u64::try_from(pttl).ok(),
    })
}

/// The holder as stored in the lease and queue hashes: a JSON array `[host, pid, user,
/// command, since_ms]`, short enough that a small lease hash keeps Redis's compact
/// encoding (values up to 64 bytes).
fn holder_json(h: &Holder) -> String {
    serde_json::to_string(&(&h.host, h.pid, &h.user, &h.command, h.acquired_at_ms))
        .unwrap_or_default()
}

/// Reads [`holder_json`] back.
fn parse_holder(json: &str) -> Option<Holder> {
    let (host, pid, user, command, acquired_at_ms) = serde_json::from_str(json).ok()?;
    Some(Holder {
        host,
        pid,
        user,
        command,
        acquired_at_ms,
    })
}

/// What one acquire attempt found when it was refused.
#[derive(Debug)]
pub(crate) struct Busy {
    /// `None` when the lock is free but reserved for the head of the queue.
    pub(crate) holder: Option<LockInfo>,
    /// 1-based place in the queue; 0 when not queued.
    position: u64,
    waiters: u64,
    /// When the lease (or a stale head's liveness) may expire, if it can.
    pub(crate) retry: Option<Duration>,
}

impl Busy {
    fn info(&self) -> WaitInfo {
        WaitInfo {
            holder: self.holder.clone(),
            position: (self.position > 0).then_some(self.position),
            waiters: Some(self.waiters),
        }
    }

    /// What a progress report is about; a report is sent only when this changes.
    fn gist(&self) -> (Option<(String, u64)>, u64, u64) {
        let holder = self
            .holder
            .as_ref()
            .map(|h| (h.owner.clone(), h.fencing_token));
        (holder, self.position, self.waiters)
    }

    fn describe(&self) -> String {
        match &self.holder {
            Some(lock) => format!("held by {}", lock.describe()),
            None => format!(
                "free but promised to the first of {} queued waiter(s)",
                self.waiters
            ),
        }
    }
}

/// The outcome of one acquire attempt on one server.
pub(crate) enum Attempt {
    Granted(Lease),
    Busy(Busy),
}

/// True when a pipelined attempt found its waiter no longer queued (`{2}`), e.g. pruned
/// after a pause: the next attempt joins the queue again.
fn left_queue(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.first(), Some(Value::Int(2))))
}

/// How a fair waiter's sleep ended.
enum Woken {
    /// The attempt pipelined behind the `BLPOP` was answered.
    Answered(Attempt),
    /// No answer to use: try again with a plain attempt.
    Retry,
    Cancelled,
}

/// Why an unfair waiter stopped sleeping.
enum Wake {
    Message,
    Timeout,
    Closed,
    Cancelled,
}

/// The pub/sub connection an unfair waiter sleeps on.
struct Wakeups {
    pubsub: PubSub,
}

impl Wakeups {
    async fn wait(&mut self, pause: Duration, cancel: &CancellationToken) -> Wake {
        let mut messages = self.pubsub.on_message();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Wake::Cancelled,
            m = messages.next() => if m.is_some() { Wake::Message } else { Wake::Closed },
            _ = tokio::time::sleep(pause) => Wake::Timeout,
        }
    }
}

/// How long past a `BLPOP` timeout we still wait for the server to answer: Redis checks
/// blocked clients' timeouts about every 100 ms, not to the millisecond.
const BLPOP_LATE: Duration = Duration::from_millis(150);

/// How long to wait for a fair waiter's wake-up: the pause asked of the server, and when to
/// stop waiting for its answer.
#[derive(Debug, Clone, Copy)]
struct Pause {
    server: Duration,
    client: Duration,
}

impl Pause {
    /// A pause that ends at a deadline (`exact`) is kept to the millisecond by our own
    /// timer; otherwise the server may answer a little late, which saves a reconnection.
    fn new(pause: Duration, exact: bool) -> Pause {
        let late = if exact {
            Duration::ZERO
        } else {
            BLPOP_LATE.min(pause / 2)
        };
        Pause {
            server: pause,
            client: pause + late,
        }
    }
}

/// How an acquire attempt treats the queue.
struct QueueArgs<'a> {
    /// The waiter id (empty: none).
    waiter: &'a str,
    /// The waiter's holder JSON, shown by `status`.
    json: &'a str,
    fair: bool,
    join: Join,
}

/// Whether an attempt that is refused joins the queue (the script's `enqueue` argument).
#[derive(Clone, Copy)]
enum Join {
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

/// One waiting acquisition: its id in the queue, and the duty to leave the queue.
/// Dropped while queued (the acquire future was dropped), it leaves from a spawned task.
struct Waiter {
    id: String,
    /// The owner id of the request: a grant whose reply was never read is released too.
    owner: String,
    keys: Keys,
    /// The holder JSON stored for `status`.
    json: String,
    /// True when we may be in the queue.
    queued: bool,
    conn: MultiplexedConnection,
    /// The connection this waiter blocks on when the backend is not exclusive.
    blocking: Option<MultiplexedConnection>,
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
    mut conn: MultiplexedConnection,
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
    cmd.arg(4)
        .arg(&keys.queue)
        .arg(&keys.alive)
        .arg(&keys.info)
        .arg(&keys.lease);
    cmd.arg(id).arg(&keys.wake_prefix).arg(owner);
}

/// Locks kept in one Redis server.
pub struct RedisBackend {
    endpoint: Endpoint,
    /// The shared multiplexed connection; `None` after it broke, reopened on next use.
    conn: Mutex<Option<MultiplexedConnection>>,
    server: Server,
}

impl RedisBackend {
    /// Connects to the server at `url` with the default [`Tuning`].
    pub async fn connect(url: &str) -> Result<RedisBackend> {
        Self::connect_with(url, Tuning::default()).await
    }

    /// Connects to the server at `url`, failing fast (`Unavailable`) when it cannot be
    /// reached or refuses our credentials.
    pub async fn connect_with(url: &str, tuning: Tuning) -> Result<RedisBackend> {
        install_crypto_provider();
        let (endpoint, secrets) =
            Endpoint::new(url, std::env::var(AUTH_ENV).ok(), tls_from_env()?)?;
        let server = Server {
            url: redact_url(url),
            secrets,
            tuning,
        };
        let client = endpoint.client(&server, true).await?;
        let conn = server.open(&client).await?;
        let backend = RedisBackend {
            endpoint,
            conn: Mutex::new(Some(conn)),
            server,
        };
        // No PING and no SCRIPT LOAD here: each costs a round trip on every `dlock` run.
        // A wrong password already failed in `open` (AUTH is part of the handshake), a
        // missing one fails the first script call with NOAUTH, and scripts are sent by
        // `EVALSHA`, falling back to `EVAL` once per server when it does not know them.
        Ok(backend)
    }

    /// The shared connection, reopened if it broke.
    async fn conn(&self) -> Result<MultiplexedConnection> {
        if let Some(conn) = self.lock_conn().clone() {
            return Ok(conn);
        }
        let client = self.endpoint.client(&self.server, true).await?;
        let conn = self.server.open(&client).await?;
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
    async fn client(&self) -> Result<Client> {
        self.endpoint.client(&self.server, false).await
    }

    fn lock_conn(&self) -> std::sync::MutexGuard<'_, Option<MultiplexedConnection>> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one request with the operation timeout; a broken connection is dropped so that
    /// the next request reconnects (e.g. after a server restart).
    async fn call<T>(
        &self,
        what: &str,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        self.call_with(|| what.to_string(), request).await
    }

    /// [`Self::call`] with the failure's description made only when it fails: the hot
    /// paths format nothing per call.
    async fn call_with<T>(
        &self,
        what: impl FnOnce() -> String,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let limit = self.server.tuning.op_timeout;
        match tokio::time::timeout(limit, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.is_unrecoverable_error() || e.is_connection_dropped() {
                    *self.lock_conn() = None;
                }
                Err(self.server.unavailable(&what(), &e))
            }
            Err(_) => Err(self.server.timed_out(&what(), limit)),
        }
    }

    /// Runs `cmd`, an `EVALSHA` of `script` (see [`evalsha`]), and returns its raw reply;
    /// on `NOSCRIPT` the script is loaded and the call made again, once.
    async fn eval(&self, what: impl FnOnce() -> String, script: &Lua, cmd: &Cmd) -> Result<Value> {
        let mut conn = self.conn().await?;
        self.call_with(what, run_script(&mut conn, script, cmd))
            .await
    }

    fn waiter(&self, req: &AcquireRequest, conn: MultiplexedConnection) -> Waiter {
        Waiter {
            id: crate::holder::new_owner_id(), // a waiter id is as random as an owner id
            owner: req.owner.clone(),
            keys: Keys::new(&req.key),
            json: holder_json(&req.holder),
            queued: false,
            conn,
            blocking: None,
            limit: self.server.tuning.op_timeout,
        }
    }

    /// One acquire attempt: one round trip.
    async fn attempt(
        &self,
        req: &AcquireRequest,
        waiter: &Waiter,
        enqueue: bool,
    ) -> Result<Attempt> {
        let queue = QueueArgs {
            waiter: &waiter.id,
            json: &waiter.json,
            fair: req.fair,
            join: if enqueue { Join::Yes } else { Join::No },
        };
        self.run_acquire(req, &waiter.keys, queue, 0).await
    }

    /// One Redlock attempt on this server: one round trip that never joins (nor respects) a
    /// queue, and raises the fencing counter to at least `floor` before a fresh grant.
    pub(crate) async fn try_grant(&self, req: &AcquireRequest, floor: u64) -> Result<Attempt> {
        let json = holder_json(&req.holder);
        let queue = QueueArgs {
            waiter: "",
            json: &json,
            fair: false,
            join: Join::No,
        };
        self.run_acquire(req, &Keys::new(&req.key), queue, floor)
            .await
    }

    /// Redlock: raises the fencing counter of `key` to at least `token` and, when `owner`
    /// holds the lease here, stamps it with `token`. True when `owner` holds it.
    pub(crate) async fn confirm_token(&self, key: &str, owner: &str, token: u64) -> Result<bool> {
        let k = Keys::new(key);
        let script = &SCRIPTS.fence;
        let mut cmd = evalsha(script, &[&k.lease, &k.fence], 2);
        cmd.arg(owner).arg(token);
        let what = || format!("cannot acquire lock '{key}'");
        let reply = self.eval(what, script, &cmd).await?;
        redis::from_redis_value::<i64>(reply)
            .map(|owned| owned == 1)
            .map_err(|e| Error::Internal(format!("unexpected reply from {}: {e}", self.server.url)))
    }

    /// Redlock: a pub/sub connection subscribed to the channel every release of `key` is
    /// published on.
    pub(crate) async fn subscribe_released(&self, key: &str) -> Result<PubSub> {
        let what = format!("cannot wait for lock '{key}'");
        self.subscribe_to(&Keys::new(key).released, &what).await
    }

    /// The acquire script with the queue arguments `queue` and the fencing floor `floor`.
    async fn run_acquire(
        &self,
        req: &AcquireRequest,
        k: &Keys,
        queue: QueueArgs<'_>,
        floor: u64,
    ) -> Result<Attempt> {
        let cmd = self.acquire_cmd(req, k, queue, floor);
        let what = || format!("cannot acquire lock '{}'", req.key);
        let sent_at = Instant::now();
        let reply = self.eval(what, &SCRIPTS.acquire, &cmd).await?;
        self.parse_attempt(req, sent_at, reply)
    }

    /// The `EVALSHA` of the acquire script (see `redis/acquire.lua` for the arguments).
    fn acquire_cmd(&self, req: &AcquireRequest, k: &Keys, queue: QueueArgs<'_>, floor: u64) -> Cmd {
        let flag = |b: bool| if b { "1" } else { "0" };
        let script = &SCRIPTS.acquire;
        let keys = [
            &*k.lease, &*k.fence, &*k.queue, &*k.alive, &*k.info, &*k.unfair,
        ];
        let mut cmd = evalsha(script, &keys, 10 + req.reenter.len());
        cmd.arg(&req.owner)
            .arg(millis(req.ttl))
            .arg(queue.waiter)
            .arg(flag(queue.fair))
            .arg(queue.join.arg())
            .arg(millis(self.server.tuning.liveness))
            .arg(&k.wake_prefix)
            .arg(queue.json)
            .arg(floor)
            .arg(crate::backend::now_ms());
        for owner in &req.reenter {
            cmd.arg(owner);
        }
        cmd
    }

    fn parse_attempt(
        &self,
        req: &AcquireRequest,
        sent_at: Instant,
        reply: Value,
    ) -> Result<Attempt> {
        let mut r = Reply::new(reply, &self.server.url)?;
        if r.next::<i64>()? == 1 {
            let owner: String = r.next()?;
            let fencing_token: u64 = r.next()?;
            let _depth: u64 = r.next()?;
            let reentered = r.next::<i64>()? == 1;
            let now_ms: u64 = r.next()?;
            let pttl: u64 = r.next()?;
            return Ok(Attempt::Granted(Lease {
                key: req.key.clone(),
                owner,
                fencing_token,
                ttl: req.ttl,
                reentered,
                sent_at,
                bound: false,
                expires_at_ms: now_ms + pttl,
            }));
        }
        let position: u64 = r.next()?;
        let waiters: u64 = r.next()?;
        let retry: i64 = r.next()?;
        let pttl: i64 = r.next()?;
        let holder = lock_info(&req.key, r.lease_fields()?, pttl);
        Ok(Attempt::Busy(Busy {
            holder,
            position,
            waiters,
            retry: u64::try_from(retry).ok().map(Duration::from_millis),
        }))
    }

    /// Tries, then waits for wake-ups and tries again, until granted, out of time, or
    /// cancelled. The caller leaves the queue on the way out.
    async fn acquire_loop(
        &self,
        req: &AcquireRequest,
        wait: &WaitOptions,
        waiter: &mut Waiter,
    ) -> Result<Acquired> {
        let started = Instant::now();
        let no_wait = wait.expired();
        let mut wakeups: Option<Wakeups> = None;
        let mut last_gist = None;
        // The attempt a fair waiter sent behind its BLPOP, already answered.
        let mut answered: Option<Attempt> = None;
        loop {
            let enqueue = req.fair && !wait.expired();
            waiter.queued |= enqueue;
            let attempt = match answered.take() {
                Some(attempt) => attempt,
                None => {
                    let conn = self.conn(); // the current one, if it was reopened
                    let Some(conn) = unless_cancelled(&wait.cancel, conn).await else {
                        return Err(self.cancelled(req));
                    };
                    waiter.conn = conn?;
                    let sent = self.attempt(req, waiter, enqueue);
                    let Some(attempt) = unless_cancelled(&wait.cancel, sent).await else {
                        waiter.queued = true; // it may have been granted: leaving undoes that
                        return Err(self.cancelled(req));
                    };
                    attempt?
                }
            };
            let busy = match attempt {
                Attempt::Granted(lease) => return self.granted(req, wait, waiter, lease).await,
                Attempt::Busy(busy) => busy,
            };
            if last_gist.as_ref() != Some(&busy.gist()) {
                last_gist = Some(busy.gist());
                wait.report(&busy.info());
            }
            if wait.expired() {
                let waited = (!no_wait).then(|| started.elapsed());
                return Err(self.not_obtained(req, &busy, waited));
            }
            if wait.cancel.is_cancelled() {
                return Err(self.cancelled(req));
            }
            let (pause, exact) = self.pause(&busy, wait);
            if req.fair {
                let pause = Pause::new(pause, exact);
                match self.wait_wake(req, waiter, pause, &wait.cancel).await? {
                    Woken::Cancelled => return Err(self.cancelled(req)),
                    Woken::Answered(attempt) => answered = Some(attempt),
                    Woken::Retry => {}
                }
                continue;
            }
            let Some(sub) = wakeups.as_mut() else {
                // Subscribe, then look again at once: a release that came before the
                // subscription was complete cannot be missed.
                let subscribing = self.subscribe(req, waiter);
                let Some(subscribed) = unless_cancelled(&wait.cancel, subscribing).await else {
                    return Err(self.cancelled(req));
                };
                wakeups = Some(subscribed?);
                continue;
            };
            match sub.wait(pause, &wait.cancel).await {
                Wake::Cancelled => return Err(self.cancelled(req)),
                Wake::Closed => wakeups = None,
                Wake::Message | Wake::Timeout => {}
            }
        }
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
    /// that connection is dropped; the attempt may still be granted on its way, which the
    /// next attempt (or leaving) finds by the owner id.
    async fn wait_wake(
        &self,
        req: &AcquireRequest,
        waiter: &mut Waiter,
        pause: Pause,
        cancel: &CancellationToken,
    ) -> Result<Woken> {
        let exclusive = self.server.tuning.exclusive;
        let mut conn = match (&waiter.blocking, exclusive) {
            (_, true) => waiter.conn.clone(),
            (Some(conn), false) => conn.clone(),
            (None, false) => {
                let conn = self.server.open(&self.client().await?).await?;
                waiter.blocking.insert(conn).clone()
            }
        };
        let mut blpop = Cmd::with_capacity(3, 64);
        blpop
            .arg("BLPOP")
            .arg(format!("{}{}", waiter.keys.wake_prefix, waiter.id))
            .arg(format!("{:.3}", pause.server.as_secs_f64().max(0.001)));
        let queue = QueueArgs {
            waiter: &waiter.id,
            json: &waiter.json,
            fair: true,
            join: Join::IfStillQueued,
        };
        let mut pipe = redis::pipe();
        pipe.add_command(blpop)
            .add_command(self.acquire_cmd(req, &waiter.keys, queue, 0));
        let sent_at = Instant::now();
        let woken = tokio::select! {
            biased;
            _ = cancel.cancelled() => Woken::Cancelled,
            r = pipe.query_async::<(Value, Value)>(&mut conn) => match r {
                Ok((_, reply)) if left_queue(&reply) => return Ok(Woken::Retry),
                Ok((_, reply)) => match self.parse_attempt(req, sent_at, reply) {
                    Ok(Attempt::Granted(lease)) if sent_at.elapsed() > req.ttl / 10 => {
                        drop(lease);
                        return Ok(Woken::Retry); // claimed again, fresh, by the next attempt
                    }
                    Ok(attempt) => return Ok(Woken::Answered(attempt)),
                    Err(_) => Woken::Retry,
                },
                Err(_) => Woken::Retry, // e.g. NOSCRIPT: the next attempt loads the script
            },
            _ = tokio::time::sleep(pause.client) => Woken::Retry,
        };
        if exclusive {
            *self.lock_conn() = None;
        } else {
            waiter.blocking = None;
        }
        Ok(woken)
    }

    /// A grant; undone at once if a cancel came while it was in flight.
    async fn granted(
        &self,
        req: &AcquireRequest,
        wait: &WaitOptions,
        waiter: &mut Waiter,
        lease: Lease,
    ) -> Result<Acquired> {
        waiter.queued = false; // the script took us off the queue
        if wait.cancel.is_cancelled() {
            let _ = self.release(&req.key, &lease.owner, ReleaseMode::One).await;
            return Err(self.cancelled(req));
        }
        Ok(Acquired { lease, guard: None })
    }

    /// Leaves the queue after a cancel, on the connection the cancelled attempt went out on
    /// when there is one (the server, when it answers again, runs the leave after that
    /// attempt, which undoes a grant it may bring), or on a new one when a cancelled
    /// `BLPOP` took it (see [`Self::wait_wake`]). The caller bounds the time spent.
    async fn leave_cancelled(&self, waiter: &mut Waiter) {
        if self.lock_conn().is_none() {
            match self.conn().await {
                Ok(conn) => waiter.conn = conn,
                Err(_) => return,
            }
        }
        waiter.leave_unanswered().await;
    }

    /// Opens the pub/sub connection of an unfair waiter, subscribed to the channel every
    /// release is published on.
    async fn subscribe(&self, req: &AcquireRequest, waiter: &Waiter) -> Result<Wakeups> {
        let what = format!("cannot wait for lock '{}'", req.key);
        let pubsub = self.subscribe_to(&waiter.keys.released, &what).await?;
        Ok(Wakeups { pubsub })
    }

    /// Opens a pub/sub connection subscribed to `channel`.
    async fn subscribe_to(&self, channel: &str, what: &str) -> Result<PubSub> {
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

    /// How long to sleep when no message comes: until the lease (or a stale head) may have
    /// expired, at most one heartbeat, and never past the deadline (then `true`: the
    /// pause must end on time).
    fn pause(&self, busy: &Busy, wait: &WaitOptions) -> (Duration, bool) {
        let heartbeat = self.server.tuning.heartbeat;
        let pause = busy.retry.map_or(heartbeat, |r| r.min(heartbeat));
        match wait.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                (pause.min(left), left <= pause)
            }
            None => (pause, false),
        }
    }

    fn not_obtained(&self, req: &AcquireRequest, busy: &Busy, waited: Option<Duration>) -> Error {
        let msg = format!(
            "lock '{}' is {} on {}",
            req.key,
            busy.describe(),
            self.server.url
        );
        Error::NotObtained(match waited {
            None => msg,
            Some(d) => {
                let d = Duration::from_millis(d.as_millis() as u64);
                format!("gave up after {}: {msg}", humantime::format_duration(d))
            }
        })
    }

    fn cancelled(&self, req: &AcquireRequest) -> Error {
        Error::Cancelled(
            format!(
                "cancelled while waiting for lock '{}' on {}",
                req.key, self.server.url
            ),
            0,
        )
    }

    /// `NotOwner` for `renew`/`release` by `owner`: the lease is gone, or someone else has it.
    fn not_owner(&self, verb: &str, key: &str, owner: &str, gone: bool) -> Error {
        let why = if gone {
            "the lease is gone (expired or released)".to_string()
        } else {
            format!("it is held by another owner, not {owner}")
        };
        Error::NotOwner(format!(
            "cannot {verb} lock '{key}' on {}: {why}",
            self.server.url
        ))
    }

    /// Releases as `mode` says; `publish: false` wakes no waiter (Redlock taking back a
    /// grant that did not make a majority: the lock is no freer than before).
    async fn release_with(
        &self,
        key: &str,
        owner: &str,
        mode: ReleaseMode,
        publish: bool,
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
        let keys = [&*k.lease, &*k.queue, &*k.alive, &*k.info, &*k.unfair];
        let mut cmd = evalsha(script, &keys, 4);
        cmd.arg(owner).arg(mode_arg).arg(wake_prefix).arg(released);
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

    /// Redlock: takes back a grant without waking anyone (see [`Self::release_with`]).
    pub(crate) async fn take_back(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<()> {
        self.release_with(key, owner, mode, false).await.map(|_| ())
    }

    /// The lease of each key (`None` when free), read in pipelines.
    async fn read_leases(&self, keys: &[String]) -> Result<Vec<Option<LockInfo>>> {
        let mut locks = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(STATUS_CHUNK) {
            let mut pipe = redis::pipe();
            for key in chunk {
                let lease = lease_key(key);
                pipe.cmd("HMGET").arg(&lease).arg(&LEASE_FIELDS[..]);
                pipe.cmd("PTTL").arg(&lease);
            }
            let mut conn = self.conn().await?;
            let reply: Value = self
                .call("cannot read lock status", pipe.query_async(&mut conn))
                .await?;
            let mut r = Reply::new(reply, &self.server.url)?;
            for key in chunk {
                let fields: Vec<Option<String>> = r.next()?;
                locks.push(lock_info(key, fields, r.next()?));
            }
        }
        Ok(locks)
    }

    /// The live waiters of each key, in queue order, in one pipeline.
    async fn read_waiters(&self, keys: &[String]) -> Result<Vec<Vec<WaiterInfo>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for key in keys {
            let k = Keys::new(key);
            pipe.cmd("ZRANGE").arg(&k.queue).arg(0).arg(-1);
            pipe.cmd("ZRANGE")
                .arg(&k.alive)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
            pipe.cmd("HGETALL").arg(&k.info);
        }
        let mut conn = self.conn().await?;
        let reply: Value = self
            .call("cannot read lock status", pipe.query_async(&mut conn))
            .await?;
        let mut r = Reply::new(reply, &self.server.url)?;
        let (secs, micros): (u64, u64) = r.next()?;
        let now_ms = (secs * 1000 + micros / 1000) as f64;
        let mut all = Vec::with_capacity(keys.len());
        for _ in keys {
            let order: Vec<String> = r.next()?;
            let alive: HashMap<String, f64> = r.next()?;
            let mut info: HashMap<String, String> = r.next()?;
            let live = |id: &String| alive.get(id).is_some_and(|deadline| *deadline > now_ms);
            let waiters = order.into_iter().filter(live).map(|id| {
                let holder = info
                    .remove(&id)
                    .and_then(|json| parse_holder(&json))
                    .unwrap_or_default();
                WaiterInfo { id, holder }
            });
            all.push(waiters.collect());
        }
        Ok(all)
    }

    /// One SCAN step: the next cursor, the locks with a lease, the locks with a queue.
    async fn scan_step(&self, cursor: u64) -> Result<(u64, Vec<String>, Vec<String>)> {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(SCAN_PATTERN);
        scan.arg("COUNT").arg(SCAN_COUNT);
        let mut conn = self.conn().await?;
        let (next, batch): (u64, Vec<Vec<u8>>) = self
            .call("cannot list locks", scan.query_async(&mut conn))
            .await?;
        let (mut held, mut queued) = (Vec::new(), Vec::new());
        for name in batch.iter().filter_map(|raw| std::str::from_utf8(raw).ok()) {
            if let Some(key) = lock_name(name, ":lease") {
                held.push(key.to_string());
            } else if let Some(key) = lock_name(name, ":queue") {
                queued.push(key.to_string());
            }
        }
        Ok((next, held, queued))
    }

    /// Every held lock, and the names of locks with a queue, by one SCAN of the keyspace.
    /// Scanning and reading the leases run side by side: while the server answers one, we
    /// read the replies of the other.
    async fn scan_locks(&self) -> Result<(Vec<LockInfo>, HashSet<String>)> {
        let (found, mut batches) = tokio::sync::mpsc::channel::<Vec<String>>(2);
        let scanning = async move {
            let (mut cursor, mut queued) = (0, HashSet::new());
            loop {
                let (next, held, with_queue) = self.scan_step(cursor).await?;
                queued.extend(with_queue);
                if found.send(held).await.is_err() || next == 0 {
                    return Ok::<_, Error>(queued);
                }
                cursor = next;
            }
        };
        let reading = async {
            let mut locks = Vec::new();
            while let Some(keys) = batches.recv().await {
                locks.extend(self.read_leases(&keys).await?.into_iter().flatten());
            }
            Ok(locks)
        };
        let (queued, locks) = tokio::try_join!(scanning, reading)?;
        Ok((locks, queued))
    }

    /// `status` with no key: every held lock, sorted by key; waiters only where a queue is.
    async fn list_held(&self) -> Result<Vec<KeyStatus>> {
        let (mut held, queued) = self.scan_locks().await?;
        held.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        held.dedup_by(|a, b| a.key == b.key); // SCAN may return a key twice
        let with_queue: Vec<String> = held
            .iter()
            .map(|lock| &lock.key)
            .filter(|key| queued.contains(*key))
            .cloned()
            .collect();
        let waiters = self.read_waiters(&with_queue).await?;
        let mut waiters: HashMap<String, Vec<WaiterInfo>> =
            with_queue.into_iter().zip(waiters).collect();
        let statuses = held.into_iter().map(|lock| KeyStatus {
            key: lock.key.clone(),
            waiters: Some(waiters.remove(&lock.key).unwrap_or_default()),
            lock: Some(lock),
            servers: None,
        });
        Ok(statuses.collect())
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn describe(&self) -> String {
        self.server.url.clone()
    }

    async fn acquire(&self, req: &AcquireRequest, wait: &WaitOptions) -> Result<Acquired> {
        if wait.cancel.is_cancelled() {
            return Err(self.cancelled(req));
        }
        let Some(conn) = unless_cancelled(&wait.cancel, self.conn()).await else {
            return Err(self.cancelled(req));
        };
        let mut waiter = self.waiter(req, conn?);
        let result = self.acquire_loop(req, wait, &mut waiter).await;
        match result {
            Err(Error::NotObtained(_)) => waiter.leave().await,
            Err(Error::Cancelled(..)) => {
                let leaving = self.leave_cancelled(&mut waiter);
                let _ = tokio::time::timeout(CANCEL_GRACE, leaving).await;
            }
            // The server may not answer: the waiter's drop leaves in the background instead
            // of making the caller wait for another timeout.
            _ => {}
        }
        result
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<Lease> {
        let lease = lease_key(key);
        let script = &SCRIPTS.renew;
        let mut cmd = evalsha(script, &[&lease], 2);
        cmd.arg(owner).arg(millis(ttl));
        let what = || format!("cannot renew lock '{key}'");
        let sent_at = Instant::now();
        let reply = self.eval(what, script, &cmd).await?;
        let mut r = Reply::new(reply, &self.server.url)?;
        match r.next::<i64>()? {
            1 => {
                let fencing_token: u64 = r.next()?;
                let now_ms: u64 = r.next()?;
                let pttl: u64 = r.next()?;
                Ok(Lease {
                    key: key.to_string(),
                    owner: owner.to_string(),
                    fencing_token,
                    ttl,
                    reentered: false,
                    sent_at,
                    bound: false,
                    expires_at_ms: now_ms + pttl,
                })
            }
            code => Err(self.not_owner("renew", key, owner, code == 0)),
        }
    }

    async fn release(&self, key: &str, owner: &str, mode: ReleaseMode) -> Result<Released> {
        self.release_with(key, owner, mode, true).await
    }

    async fn status(&self, keys: &[String]) -> Result<Vec<KeyStatus>> {
        if keys.is_empty() {
            return self.list_held().await;
        }
        let locks = self.read_leases(keys).await?;
        let waiters = self.read_waiters(keys).await?;
        let statuses = keys.iter().zip(locks).zip(waiters);
        Ok(statuses
            .map(|((key, lock), waiters)| KeyStatus {
                key: key.clone(),
                lock,
                waiters: Some(waiters),
                servers: None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_tag() {
        let k = Keys::new("deploy/prod");
        for name in [&k.lease, &k.fence, &k.queue, &k.alive, &k.info] {
            assert!(name.starts_with("dlock:{deploy/prod}:"), "{name}");
        }
    }

    #[test]
    fn lock_names_are_read_back() {
        let k = Keys::new("a}:b{c");
        assert_eq!(lock_name(&k.lease, ":lease"), Some("a}:b{c"));
        assert_eq!(lock_name(&k.queue, ":queue"), Some("a}:b{c"));
        assert_eq!(lock_name(&k.fence, ":lease"), None);
    }

    #[test]
    fn build_time_hashes_match_the_scripts() {
        let s = &SCRIPTS;
        for lua in [&s.acquire, &s.renew, &s.release, &s.leave, &s.fence] {
            assert_eq!(redis::Script::new(lua.body).get_hash(), lua.sha);
        }
    }

    #[test]
    fn lock_info_reads_fields() {
        let f = |s: &str| Some(s.to_string());
        let holder = &holder_json(&Holder {
            host: "h".into(),
            pid: 42,
            user: "u".into(),
            command: "sleep 1".into(),
            acquired_at_ms: 5,
        });
        let fields = vec![f("o1"), f("7"), f("2"), f(holder), f("1000")];
        let info = lock_info("k", fields, 500).unwrap();
        assert_eq!(info.owner, "o1");
        assert_eq!(info.fencing_token, 7);
        assert_eq!(info.depth, 2);
        assert_eq!(info.holder.pid, 42);
        assert_eq!(info.ttl_left_ms, Some(500));
        assert_eq!(info.describe(), "o1 (h pid 42: sleep 1)");
        assert_eq!(info.holder.acquired_at_ms, 1000);
        assert!(lock_info("k", vec![None; 5], -2).is_none());
    }
}
