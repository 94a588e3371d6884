//! Opening connections: plain or rustls, each driven by a task of its own that also hands
//! on the notifications it receives; timeouts; and one-line errors without the password.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, Client, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::url::Target;
use crate::backend::{sql, url};
use crate::env;
use crate::error::{Error, Result};

/// How long dlock waits for the server, and how waiters keep their place.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub connect_timeout: Duration,
    /// Longest wait for any one request: a paused server must not hang us.
    pub op_timeout: Duration,
    /// A waiter looks again (and refreshes its place in the queue) at least this often.
    pub heartbeat: Duration,
    /// A waiter that has not refreshed its place for this long is dropped from the queue.
    pub liveness: Duration,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            connect_timeout: Duration::from_secs(2),
            op_timeout: Duration::from_secs(3),
            heartbeat: Duration::from_secs(1),
            liveness: Duration::from_secs(5),
        }
    }
}

/// Server-side limits set on every session: a client frozen inside a transaction (SIGSTOP)
/// must not keep a key's row locked, and nobody waits on a row lock for long: the server
/// answers a lock wait before the client's own time limit (the connection is kept), and
/// the waiting loop tries again.
const SESSION_OPTIONS: &str =
    "-c idle_in_transaction_session_timeout=5000 -c lock_timeout=2000 -c application_name=dlock";

/// A notification: the channel's payload (see [`super::schema::payload`]).
pub type Note = Arc<str>;

/// The server as dlock reaches it.
pub struct Server {
    pub target: Target,
    pub tuning: Tuning,
    tls: Option<MakeRustlsConnect>,
}

impl Server {
    pub fn new(target: Target, tuning: Tuning) -> Result<Server> {
        let tls = match target.tls {
            true => Some(rustls_connector()?),
            false => None,
        };
        Ok(Server {
            target,
            tuning,
            tls,
        })
    }

    /// Opens a connection; its notifications go to `notes` when given.
    pub async fn open(&self, notes: Option<broadcast::Sender<Note>>) -> Result<Client> {
        let mut config = self.target.config.clone();
        config.connect_timeout(self.tuning.connect_timeout);
        config.options(SESSION_OPTIONS);
        let connecting = async {
            match &self.tls {
                Some(tls) => drive(config.connect(tls.clone()).await?, notes),
                None => drive(config.connect(tokio_postgres::NoTls).await?, notes),
            }
        };
        let limit = self.tuning.connect_timeout + Duration::from_millis(500);
        match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(self.unavailable("cannot connect", &e)),
            Err(_) => Err(self.timed_out("cannot connect", limit)),
        }
    }

    /// Runs one request within the time limit.
    pub async fn within<T>(
        &self,
        what: &str,
        request: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.tuning.op_timeout, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unavailable(what, &e)),
            Err(_) => Err(self.timed_out(what, self.tuning.op_timeout)),
        }
    }

    /// One line naming what failed and the server, never the password.
    pub fn line(&self, msg: String) -> String {
        url::one_line(&msg, self.target.secret.as_slice())
    }

    /// A failed request as an error of its kind (see [`passing`]), in one line.
    pub fn unavailable(&self, what: &str, e: &tokio_postgres::Error) -> Error {
        let why = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None if password_missing(e) => format!(
                "the server wants a password (give it in the URL or {})",
                env::PG_PASSWORD
            ),
            None => match std::error::Error::source(e) {
                Some(source) => format!("{e}: {source}"),
                None => e.to_string(),
            },
        };
        let hint = match e.code().map(|c| c.code()) {
            Some("28P01") | Some("28000") => {
                format!(" (give the password in the URL or {})", env::PG_PASSWORD)
            }
            _ => String::new(),
        };
        let msg = self.line(format!("{}: {what}: {why}{hint}", self.target.name));
        sql::failure(passing(e), msg)
    }

    /// `e`, met by a request about `key`, naming it (see [`sql::naming`]).
    pub fn naming(&self, key: &str, e: Error) -> Error {
        sql::naming(key, &self.target.name, e)
    }

    pub fn timed_out(&self, what: &str, limit: Duration) -> Error {
        sql::no_answer(&self.target.name, what, limit)
    }
}

/// SQLSTATEs of PostgreSQL's own that the next try may well not meet: a lock wait or a
/// statement timed out (a client frozen in a transaction holds the row), the session was
/// ended (`pg_terminate_backend`, an idle-session timeout), the server is shutting down or
/// starting, or has no connection slot free.
const PASSING: [&str; 8] = [
    "55P03", "57014", "57P01", "57P02", "57P03", "57P05", "25P03", "53300",
];

/// Whether the next try may well not meet `e` (see [`sql::failure`]): the states above and
/// the ones both servers share, a closed connection, a connection refused or reset. A
/// refused password, a missing database, table or permission, bad data, a TLS or
/// protocol failure stay.
fn passing(e: &tokio_postgres::Error) -> bool {
    if let Some(state) = e.code() {
        return sql::passing_state(state.code()) || PASSING.contains(&state.code());
    }
    e.is_closed() || sql::io_error(e).is_some_and(|io| sql::passing_io(io.kind()))
}

/// The server asked for a password and none was given (the client says only "invalid
/// configuration").
fn password_missing(e: &tokio_postgres::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.to_string() == "password missing")
}

/// Spawns the task that drives a connection (it must be polled for the client to work),
/// handing notifications on to `notes`. The task ends when the connection does.
fn drive<T>(
    (client, mut connection): (Client, Connection<Socket, T>),
    notes: Option<broadcast::Sender<Note>>,
) -> std::result::Result<Client, tokio_postgres::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let (AsyncMessage::Notification(n), Some(notes)) = (message, &notes) {
                let _ = notes.send(Arc::from(n.payload()));
            }
        }
    });
    Ok(client)
}

/// rustls with ring, trusting `DLOCK_TLS_CA` when set, else the system's roots.
fn rustls_connector() -> Result<MakeRustlsConnect> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    match std::env::var_os(env::TLS_CA).filter(|v| !v.is_empty()) {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(&path)
                .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| {
                    Error::Usage(format!(
                        "cannot read {} file {}: {e}",
                        env::TLS_CA,
                        std::path::Path::new(&path).display()
                    ))
                })?;
            roots.add_parsable_certificates(certs);
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}
