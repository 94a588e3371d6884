//! `postgres://[user[:password]@]host[:port][/db][?param=value&…]` (also `postgresql://`):
//! the server, the database, and where the lock table lives.
//!
//! dlock's own parameters (`table`, `schema`, `sslmode`) are read here; every other one
//! (`host=/run/postgresql` for a socket, `connect_timeout`, `application_name`, …) goes to
//! the client as libpq would read it. The password comes from the URL, else from
//! `PGPASSWORD`; the user from the URL, else `PGUSER`, else the login name.

use std::str::FromStr;

use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

use crate::backend::url::{redact as redact_url, Url};
use crate::error::{Error, Result};

/// The lock table when `?table=` does not name one.
pub const DEFAULT_TABLE: &str = "dlock_locks";

/// What a `postgres://` URL names.
#[derive(Clone)]
pub struct Target {
    /// The client's settings, password included: never printed.
    pub config: Config,
    /// `postgres://host:port/db`, for messages (no user, no password).
    pub name: String,
    /// The schema of the tables, `None` for the search path's first.
    pub schema: Option<String>,
    /// The lock table; the waiters' table is `<table>_waiters`.
    pub table: String,
    /// TLS with rustls, the server's certificate verified (`sslmode=require` and up).
    pub tls: bool,
    /// The password, to scrub from any message as a last line of defence.
    pub secret: Option<String>,
    /// `?lock=advisory`: keys are PostgreSQL advisory locks held by a session
    /// ([`super::AdvisoryStore`]); `?lock=table` (the default): dlock's lease table.
    pub advisory: bool,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("tls", &self.tls)
            .finish()
    }
}

fn usage(url: &str, why: &str) -> Error {
    Error::Usage(format!("bad PostgreSQL URL {}: {why}", redact_url(url)))
}

/// A table or schema name: see [`crate::backend::sql::identifier`].
fn identifier(url: &str, what: &str, name: &str) -> Result<String> {
    crate::backend::sql::identifier(name).map_err(|why| usage(url, &format!("{what} {why}")))
}

/// Reads a `postgres://` or `postgresql://` URL, with `PGPASSWORD`/`PGUSER` as given.
pub fn parse_with(
    url: &str,
    env_password: Option<String>,
    env_user: Option<String>,
) -> Result<Target> {
    let u = crate::backend::url::parse(url).map_err(|why| usage(url, &why))?;
    if !matches!(u.scheme.as_str(), "postgres" | "postgresql") {
        return Err(usage(
            url,
            "it must start with postgres:// or postgresql://",
        ));
    }
    let (mut table, mut schema, mut tls) = (DEFAULT_TABLE.to_string(), None, false);
    let mut advisory = false;
    let mut passed = Vec::new();
    for (name, value) in &u.query {
        match name.as_str() {
            "table" => table = identifier(url, "table", value)?,
            "schema" => schema = Some(identifier(url, "schema", value)?),
            "sslmode" => tls = ssl_mode(url, value)?,
            "lock" => advisory = lock_mode(url, value)?,
            "password" => return Err(usage(url, "give the password before '@' or in PGPASSWORD")),
            "user" | "dbname" | "port" => {
                return Err(usage(
                    url,
                    &format!("give the {name} in the URL itself, not as ?{name}="),
                ))
            }
            "host" if !u.hosts.is_empty() => {
                return Err(usage(
                    url,
                    "give the host either before the path or as ?host=, not both",
                ))
            }
            _ => passed.push((name.as_str(), value.as_str())),
        }
    }
    let mut config = client_config(&u, &passed).map_err(|why| usage(url, &why))?;
    config.ssl_mode(if tls {
        SslMode::Require
    } else {
        SslMode::Disable
    });
    if config.get_password().is_none() {
        if let Some(p) = env_password.filter(|p| !p.is_empty()) {
            config.password(p);
        }
    }
    if config.get_user().is_none() {
        let user = env_user.filter(|u| !u.is_empty()).or_else(login_name);
        config.user(user.unwrap_or_else(|| "postgres".into()));
    }
    let secret = config
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    Ok(Target {
        name: describe(&config),
        config,
        schema,
        table,
        tls,
        secret,
        advisory,
    })
}

/// `?lock=advisory` or `?lock=table`.
fn lock_mode(url: &str, mode: &str) -> Result<bool> {
    match mode {
        "advisory" => Ok(true),
        "table" => Ok(false),
        other => Err(usage(
            url,
            &format!("lock={other} is not a lock mode (advisory or table)"),
        )),
    }
}

/// The client's settings from what dlock read, through the URL written again for the
/// client's own reader ([`Url::for_client`]).
fn client_config(u: &Url, passed: &[(&str, &str)]) -> std::result::Result<Config, String> {
    Config::from_str(&u.for_client("postgresql", passed)?).map_err(|e| e.to_string())
}

/// Reads a URL with the password and user the environment gives.
pub fn parse(url: &str) -> Result<Target> {
    let var = |name: &str| std::env::var(name).ok();
    parse_with(url, var(crate::env::PG_PASSWORD), var(crate::env::PG_USER))
}

/// `disable`, `allow` and `prefer` mean plain TCP; `require`, `verify-ca` and
/// `verify-full` mean TLS, always with the certificate verified (rustls has no unverified
/// mode), so `require` is as strict as `verify-full` here.
fn ssl_mode(url: &str, mode: &str) -> Result<bool> {
    match mode {
        "disable" | "allow" | "prefer" => Ok(false),
        "require" | "verify-ca" | "verify-full" => Ok(true),
        other => Err(usage(
            url,
            &format!("unknown sslmode '{other}' (disable, prefer, require, verify-full)"),
        )),
    }
}

fn login_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// `postgres://host:port/db` from the settings.
fn describe(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(h) => format!("{h}:{port}"),
                Host::Unix(p) => format!("{}:{port}", p.display()),
            }
        })
        .collect();
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or_default();
    format!("postgres://{}/{db}", hosts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(url: &str) -> Result<Target> {
        parse_with(url, None, Some("me".into()))
    }

    #[test]
    fn urls() {
        let t = p("postgres://u:pw@db.example:6543/app?table=locks&schema=ops").unwrap();
        assert_eq!(t.name, "postgres://db.example:6543/app");
        assert_eq!(t.table, "locks");
        assert_eq!(t.schema.as_deref(), Some("ops"));
        assert_eq!(t.config.get_user(), Some("u"));
        assert_eq!(t.config.get_password(), Some(&b"pw"[..]));
        assert!(!t.tls);
        assert!(!format!("{t:?}").contains("pw"));
        let t = p("postgresql://h/d?sslmode=require&connect_timeout=3").unwrap();
        assert!(t.tls);
        assert_eq!(t.table, DEFAULT_TABLE);
        assert_eq!(t.config.get_user(), Some("me"));
        assert_eq!(t.name, "postgres://h:5432/d");
        let t = parse_with("postgres://u@h/d", Some("envpw".into()), None).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"envpw"[..]));
        assert_eq!(t.secret.as_deref(), Some("envpw"));
        for bad in [
            "postgres://h/d?table=Bad",
            "postgres://h/d?table=a;drop",
            "postgres://h/d?sslmode=sometimes",
            "postgres://h/d?nonsense=1",
            "postgres://h/d?password=x",
            "mysql://h/d",
        ] {
            assert_eq!(p(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
        let t = p("postgres://u:p@ss/w?rd%25,x@h:1,[::1]:2/d%2Fb").unwrap();
        assert_eq!(t.config.get_password(), Some(&b"p@ss/w?rd%,x"[..]));
        assert_eq!(t.config.get_dbname(), Some("d/b"));
        assert_eq!(t.name, "postgres://h:1,::1:2/d/b");
        let t = p("postgres:///d?host=/nonexistent").unwrap();
        assert_eq!(t.name, "postgres:///nonexistent:5432/d");
        for bad in [
            "postgres://h/d?host=/tmp",
            "postgres://h/d?sslmode=require&sslmode=disable",
        ] {
            assert_eq!(p(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
        let e = p("postgres://u:secret@h/d?sslmode=x")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("secret"), "{e}");
    }
}
