//! Opening connections (plain or rustls), timeouts, and one-line errors without the
//! password.

use std::path::PathBuf;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, SslOpts};

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
    /// A waiter looks again (and refreshes its place in the queue) at least this often,
    /// unless it is blocked on the named lock of a waiter ahead of it (see `behind`).
    pub heartbeat: Duration,
    /// How often a waiter blocked on the named lock of the waiter ahead of it looks again:
    /// that one's session keeps both places alive, and its moves wake it.
    pub behind: Duration,
    /// A waiter that has not refreshed its place for this long is dropped from the queue.
    pub liveness: Duration,
    /// How soon the head of the queue looks again after it first saw a lease (jittered
    /// from half of it), doubling per look that finds the same lease up to `head_recheck`:
    /// there is no notification to wake it, and most holds are short.
    pub head_first: Duration,
    /// How often the head of the queue looks again while one lease lasts.
    pub head_recheck: Duration,
    /// The longest re-check of a waiter behind the head.
    pub tail_recheck: Duration,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            connect_timeout: Duration::from_secs(2),
            op_timeout: Duration::from_secs(3),
            heartbeat: Duration::from_secs(1),
            behind: Duration::from_secs(10),
            liveness: Duration::from_secs(5),
            head_first: Duration::from_millis(5),
            head_recheck: Duration::from_millis(40),
            tail_recheck: Duration::from_millis(250),
        }
    }
}

/// Set on every session: times in UTC (so that `UNIX_TIMESTAMP(NOW(3))` is exact, with no
/// daylight-saving hour read twice), each statement sees what was committed before it
/// (READ COMMITTED, no gap locks), and nobody waits on a row lock for long: the server
/// answers a lock wait before the client's own time limit, and the waiting loop tries
/// again.
const SESSION: [&str; 3] = [
    "SET SESSION time_zone = '+00:00'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET SESSION innodb_lock_wait_timeout = 2",
];

/// MariaDB only (MySQL has no such limit, and refuses it): a client frozen inside a
/// transaction (SIGSTOP) must not keep a key's row locked.
const IDLE_IN_TRANSACTION: &str = "SET SESSION idle_transaction_timeout = 5";

/// The server as dlock reaches it.
pub struct Server {
    pub target: Target,
    pub tuning: Tuning,
}

impl Server {
    pub fn new(target: Target, tuning: Tuning) -> Result<Server> {
        if target.tls {
            ca_file()?;
        }
        Ok(Server { target, tuning })
    }

    /// Opens a connection, its session set up.
    pub async fn open(&self) -> Result<Conn> {
        let mut builder = OptsBuilder::from_opts(self.target.opts.clone())
            .prefer_socket(false)
            .client_found_rows(true)
            .tcp_keepalive(Some(Duration::from_secs(10)))
            .init(SESSION.to_vec());
        if self.target.tls {
            builder = builder.ssl_opts(ssl_opts()?);
        }
        let connecting = async {
            let mut conn = Conn::new(builder).await?;
            let _ = conn.query_drop(IDLE_IN_TRANSACTION).await;
            Ok::<_, mysql_async::Error>(conn)
        };
        let limit = self.tuning.connect_timeout + Duration::from_millis(500);
        match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(self.unavailable("cannot connect", &e)),
            Err(_) => Err(self.timed_out("cannot connect", limit)),
        }
    }

    /// Runs one request within the time limit.
    pub async fn within<T>(
        &self,
        what: &str,
        request: impl std::future::Future<Output = std::result::Result<T, mysql_async::Error>>,
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
    pub fn unavailable(&self, what: &str, e: &mysql_async::Error) -> Error {
        let (why, hint) = match e {
            mysql_async::Error::Server(s) => {
                let hint = match s.code {
                    1045 | 1698 => format!(" (give the password in the URL or {})", env::MYSQL_PWD),
                    _ => String::new(),
                };
                (format!("{} (error {})", s.message, s.code), hint)
            }
            // The client nests I/O errors, each level saying so: once is enough.
            other => (
                other.to_string().replace("Input/output error: ", ""),
                String::new(),
            ),
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

/// Server error codes that the next try may well not meet: a lock wait timed out (a
/// client frozen in a transaction holds the row), the server is shutting down, the
/// connection or its statement was killed (`KILL`), the session was ended for idling.
const PASSING: [u16; 5] = [1205, 1053, 1927, 1317, 4031];

/// Whether the next try may well not meet `e` (see [`sql::failure`]): the codes above and
/// the states both servers share, a connection closed, refused or reset ("server has gone
/// away"). A refused password, a missing database, table or privilege, bad data, a TLS or
/// protocol failure stay.
fn passing(e: &mysql_async::Error) -> bool {
    match e {
        mysql_async::Error::Server(s) => sql::passing_state(&s.state) || PASSING.contains(&s.code),
        mysql_async::Error::Io(mysql_async::IoError::Io(io)) => sql::passing_io(io.kind()),
        mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed) => true,
        _ => false,
    }
}

/// `DLOCK_TLS_CA`, when set: checked once, up front, so that a wrong path is a usage error.
fn ca_file() -> Result<Option<PathBuf>> {
    let Some(path) = std::env::var_os(env::TLS_CA).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    std::fs::metadata(&path).map_err(|e| {
        Error::Usage(format!(
            "cannot read {} file {}: {e}",
            env::TLS_CA,
            path.display()
        ))
    })?;
    Ok(Some(path))
}

/// rustls (ring), the certificate and host name verified, trusting `DLOCK_TLS_CA` when
/// set, else the roots built into the client (Mozilla's).
fn ssl_opts() -> Result<SslOpts> {
    let opts = SslOpts::default();
    Ok(match ca_file()? {
        Some(path) => opts
            .with_root_certs(vec![path.into()])
            .with_disable_built_in_roots(true),
        None => opts,
    })
}
