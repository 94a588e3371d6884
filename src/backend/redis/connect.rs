//! Reaching the server: URLs (`redis://`, `rediss://`, `redis+unix://`,
//! `redis+sentinel://`, and `redis+cluster://` through `cluster.rs`), TLS material,
//! Sentinel, the timing knobs, and the one-line errors that name the server and never its
//! password.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, RedisError, TlsCertificates,
    TlsMode,
};

use super::cluster::Cluster;
use super::conn::Conn;
use super::url::{Kind, SentinelTarget, Target};
use crate::backend::url;
use crate::env;
use crate::error::{Error, Result};

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

/// The TLS material named by [`env::TLS_CA`], [`env::TLS_CERT`] and [`env::TLS_KEY`] (paths to
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
            client_cert: read(env::TLS_CERT, cert)?,
            client_key: read(env::TLS_KEY, key)?,
        }),
        (None, None) => None,
        _ => {
            return Err(Error::Usage(format!(
                "{} and {} go together: set both for a client certificate, or neither",
                env::TLS_CERT,
                env::TLS_KEY
            )))
        }
    };
    let root_cert = ca.map(|ca| read(env::TLS_CA, ca)).transpose()?;
    if client_tls.is_none() && root_cert.is_none() {
        return Ok(None);
    }
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// [`tls_certificates`] from the environment.
pub(super) fn tls_from_env() -> Result<Option<TlsCertificates>> {
    let path = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let (ca, cert, key) = (path(env::TLS_CA), path(env::TLS_CERT), path(env::TLS_KEY));
    tls_certificates(ca.as_deref(), cert.as_deref(), key.as_deref())
}

/// Where the server is: one address, the master a set of Sentinels names, or a Cluster.
pub(super) enum Endpoint {
    Direct(Client),
    Cluster(Box<Cluster>),
    Sentinel {
        sentinels: Box<tokio::sync::Mutex<SentinelClient>>,
        /// The master found last; looked up again whenever the connection is reopened.
        master: Mutex<Option<Client>>,
    },
}

impl Endpoint {
    /// The endpoint of `target` (read from `url`), and every secret it carries (to scrub
    /// from messages).
    pub(super) fn new(
        target: &Target,
        url: &str,
        tls: Option<TlsCertificates>,
    ) -> Result<(Endpoint, Vec<String>)> {
        let invalid =
            |e: RedisError| Error::Usage(format!("invalid Redis URL {}: {e}", url::redact(url)));
        let mut secrets = target.secrets();
        let endpoint = match &target.kind {
            Kind::Cluster(nodes) => {
                let timeout = Tuning::default().connect_timeout;
                let cluster = Cluster::new(nodes, tls, timeout).map_err(invalid)?;
                Endpoint::Cluster(Box::new(cluster))
            }
            Kind::Sentinel(sentinel) => {
                let sentinel_password = std::env::var(env::SENTINEL_PASSWORD)
                    .ok()
                    .filter(|p| !p.is_empty());
                secrets.extend(sentinel_password.clone());
                Endpoint::sentinel(sentinel, sentinel_password, tls).map_err(invalid)?
            }
            Kind::Direct(info) => {
                let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
                let built = match tls {
                    Some(certs) if is_tls => Client::build_with_tls(info.clone(), certs),
                    _ => Client::open(info.clone()),
                };
                Endpoint::Direct(built.map_err(invalid)?)
            }
        };
        Ok((endpoint, secrets))
    }

    /// The master a set of Sentinels names.
    fn sentinel(
        parsed: &SentinelTarget,
        sentinel_password: Option<String>,
        tls: Option<TlsCertificates>,
    ) -> redis::RedisResult<Endpoint> {
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
        let mut builder =
            SentinelClientBuilder::new(nodes, &parsed.service, SentinelServerType::Master)?
                .set_client_to_redis_db(parsed.db);
        if let Some(user) = &parsed.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &parsed.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(password) = &sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if parsed.tls {
            builder = sentinel_tls(builder, parsed.insecure, tls);
        }
        Ok(Endpoint::Sentinel {
            sentinels: Box::new(tokio::sync::Mutex::new(builder.build()?)),
            master: Mutex::new(None),
        })
    }

    /// Opens a connection; for Sentinel, to the master looked up again.
    pub(super) async fn open(&self, server: &Server) -> Result<Conn> {
        match self {
            Endpoint::Cluster(cluster) => {
                let connecting = cluster.connect();
                let limit = server.tuning.connect_timeout;
                server
                    .within(limit, "cannot connect", connecting)
                    .await
                    .map(Conn::Cluster)
            }
            _ => {
                let client = self.client(server, true).await?;
                server.open(&client).await.map(Conn::Single)
            }
        }
    }

    /// The client of one server (for pub/sub); for Sentinel, the master is looked up again
    /// when `fresh` (a connection is being (re)opened) or not known yet; for a Cluster, the
    /// first node listed (a `PUBLISH` reaches every node).
    pub(super) async fn client(&self, server: &Server, fresh: bool) -> Result<Client> {
        match self {
            Endpoint::Direct(client) => Ok(client.clone()),
            Endpoint::Cluster(cluster) => Ok(cluster.seeds[0].clone()),
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

/// True when `e` is what a server says, or how a request fails, while a master fails over
/// or a slot moves: a redirection the client could not follow in time (`MOVED`, `ASK`),
/// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY` or another refusal from
/// a master just demoted to replica (`WAIT` there), a connection lost or not to be found
/// for a slot, a Sentinel that names no master yet. The next try, on the new map or
/// master, may well not meet it.
pub(super) fn failing_over(e: &RedisError) -> bool {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    match e.kind() {
        K::Server(S::Moved | S::Ask | S::TryAgain | S::ClusterDown | S::MasterDown) => true,
        K::Server(S::BusyLoading | S::ReadOnly) => true,
        K::Server(S::ResponseError) => e.detail().is_some_and(|d| d.contains("replica")),
        K::Io | K::ClusterConnectionNotFound => true,
        K::MasterNameNotFoundBySentinel | K::NoValidReplicasFoundBySentinel => true,
        _ => e.is_connection_dropped() || e.is_timeout(),
    }
}

/// A connection refused, reset or timed out, on any server: one made again may well
/// not meet it (a server restarting, a network blip). A refused handshake or password
/// is not this.
fn connection_lost(e: &RedisError) -> bool {
    e.is_connection_refusal() || e.is_connection_dropped() || e.is_timeout()
}

/// TLS to the Sentinels and to the master alike (`rediss+sentinel://`).
fn sentinel_tls(
    builder: SentinelClientBuilder,
    insecure: bool,
    tls: Option<TlsCertificates>,
) -> SentinelClientBuilder {
    let mode = if insecure {
        TlsMode::Insecure
    } else {
        TlsMode::Secure
    };
    let builder = builder
        .set_client_to_redis_tls_mode(mode)
        .set_client_to_sentinel_tls_mode(mode);
    match tls {
        Some(certs) => builder
            .set_client_to_redis_certificates(certs.clone())
            .set_client_to_sentinel_certificates(certs),
        None => builder,
    }
}

/// The server as named in messages, and how long we wait for it.
#[derive(Clone)]
pub(super) struct Server {
    /// The redacted URL.
    pub(super) url: String,
    /// The passwords, scrubbed from any message as a last line of defence.
    pub(super) secrets: Vec<String>,
    pub(super) tuning: Tuning,
    /// The master may change under us (Sentinel, Cluster): a failure that
    /// [`failing_over`] recognises is [`Error::Transient`], which waiters ride out and
    /// holders retry. On every server, a lost connection or one that does not answer is.
    pub(super) fails_over: bool,
}

impl Server {
    /// One line naming what failed and the server, never the password.
    pub(super) fn line(&self, msg: String) -> String {
        url::one_line(&msg, &self.secrets)
    }

    pub(super) fn unavailable(&self, what: &str, e: &RedisError) -> Error {
        if needs_password(e) {
            return Error::Unavailable(self.line(format!(
                "{}: {what}: authentication required: the server wants a password (give it \
                 in the URL or in {})",
                self.url,
                env::REDIS_AUTH
            )));
        }
        let msg = self.line(format!("{}: {what}: {e}", self.url));
        // A Cluster client reports a refused password as an I/O failure of its nodes.
        let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
            || e.to_string().contains("AuthenticationFailed");
        let passing = !refused && (connection_lost(e) || self.fails_over && failing_over(e));
        match passing {
            true => Error::Transient(msg),
            false => Error::Unavailable(msg),
        }
    }

    pub(super) fn timed_out(&self, what: &str, limit: Duration) -> Error {
        let msg = self.line(format!(
            "{}: {what}: timed out after {} (server not answering)",
            self.url,
            humantime::format_duration(limit)
        ));
        Error::Transient(msg)
    }

    /// Runs one request within `limit`, mapping every failure to `Unavailable`.
    pub(super) async fn within<T>(
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
    pub(super) async fn open(&self, client: &Client) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.tuning.connect_timeout))
            .set_response_timeout(None); // we time every request ourselves
        let connecting = client.get_multiplexed_async_connection_with_config(&config);
        self.within(self.tuning.connect_timeout, "cannot connect", connecting)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a server's `-…` reply `resp` makes.
    fn refusal(resp: &str) -> RedisError {
        let value = redis::parse_redis_value(resp.as_bytes()).expect("a reply");
        value.extract_error().expect_err("a refusal")
    }

    fn server(fails_over: bool) -> Server {
        Server {
            url: "redis+cluster://h:1".into(),
            secrets: Vec::new(),
            tuning: Tuning::default(),
            fails_over,
        }
    }

    #[test]
    fn replies_met_while_a_master_fails_over_are_transient() {
        for resp in [
            "-MOVED 3999 127.0.0.1:6381\r\n",
            "-ASK 3999 127.0.0.1:6381\r\n",
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
            "-MASTERDOWN Link with MASTER is down\r\n",
            "-LOADING Redis is loading the dataset in memory\r\n",
            "-READONLY You can't write against a read only replica.\r\n",
            "-ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.\r\n",
        ] {
            let e = refusal(resp);
            assert!(failing_over(&e), "{resp}");
            assert!(server(true).unavailable("x", &e).is_retryable(), "{resp}");
            // One server has no failover to wait for.
            let direct = server(false).unavailable("x", &e);
            assert!(matches!(direct, Error::Unavailable(_)), "{resp}");
        }
        assert!(server(true)
            .timed_out("x", Duration::from_secs(1))
            .is_retryable());
    }

    /// A server restarting, a network blip: every server, failover or not, is tried again.
    #[test]
    fn lost_connections_are_transient_on_every_server() {
        use std::io::ErrorKind::{ConnectionRefused, ConnectionReset, TimedOut};
        for kind in [ConnectionRefused, ConnectionReset, TimedOut] {
            let e = RedisError::from(std::io::Error::from(kind));
            for fails_over in [true, false] {
                let error = server(fails_over).unavailable("x", &e);
                assert!(error.is_retryable(), "{kind:?} {fails_over}: {error}");
            }
        }
        let silent = server(false).timed_out("x", Duration::from_secs(1));
        assert!(silent.is_retryable());
    }

    #[test]
    fn refusals_of_the_request_itself_stay_fatal() {
        for resp in [
            "-NOAUTH Authentication required.\r\n",
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
            "-NOPERM User u has no permissions to run the 'evalsha' command\r\n",
            "-ERR unknown command 'WAIT'\r\n",
            "-CROSSSLOT Keys in request don't hash to the same slot\r\n",
        ] {
            let e = refusal(resp);
            assert!(!failing_over(&e), "{resp}");
            let error = server(true).unavailable("x", &e);
            assert!(matches!(error, Error::Unavailable(_)), "{resp}: {error}");
        }
    }
}
