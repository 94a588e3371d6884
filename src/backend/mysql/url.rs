//! `mysql://[user[:password]@]host[:port]/db[?param=value&…]` (also `mariadb://`): the
//! server, the database, the lock table, TLS.
//!
//! dlock's own parameters (`table`, `ssl-mode`) are read here; every other one
//! (`socket=/run/mysqld/mysqld.sock`, `compression=fast`, …) goes to the client. The
//! password comes from the URL, else from `MYSQL_PWD` (as the `mysql` client reads it);
//! the user from the URL, else the login name.

use mysql_async::{Opts, OptsBuilder};

use crate::backend::url::{redact as redact_url, Url};
use crate::error::{Error, Result};

/// The lock table when `?table=` does not name one.
pub const DEFAULT_TABLE: &str = "dlock_locks";

/// What a `mysql://` URL names.
#[derive(Clone)]
pub struct Target {
    /// The client's settings, password included: never printed.
    pub opts: Opts,
    /// `mysql://host:port/db`, for messages (no user, no password).
    pub name: String,
    /// The lock table; the waiters' table is `<table>_waiters`.
    pub table: String,
    /// TLS with rustls, the server's certificate verified (`ssl-mode=REQUIRED` and up).
    pub tls: bool,
    /// The password, to scrub from any message as a last line of defence.
    pub secret: Option<String>,
    /// `?lock=get_lock`: keys are the server's user locks (`GET_LOCK`) held by a session
    /// ([`super::UserLockStore`]); `?lock=table` (the default): dlock's lease table.
    pub user_locks: bool,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("table", &self.table)
            .field("tls", &self.tls)
            .finish()
    }
}

fn usage(url: &str, why: &str) -> Error {
    Error::Usage(format!("bad MySQL URL {}: {why}", redact_url(url)))
}

/// Reads a `mysql://` or `mariadb://` URL, with `MYSQL_PWD` as given.
pub fn parse_with(url: &str, env_password: Option<String>) -> Result<Target> {
    let u = crate::backend::url::parse(url).map_err(|why| usage(url, &why))?;
    if !matches!(u.scheme.as_str(), "mysql" | "mariadb") {
        return Err(usage(url, "it must start with mysql:// or mariadb://"));
    }
    let (mut table, mut tls) = (DEFAULT_TABLE.to_string(), false);
    let mut user_locks = false;
    let mut passed = Vec::new();
    for (name, value) in &u.query {
        match name.as_str() {
            "table" => {
                table = super::super::sql::identifier(value)
                    .map_err(|why| usage(url, &format!("table {why}")))?
            }
            "ssl-mode" | "ssl_mode" | "sslmode" => tls = ssl_mode(url, value)?,
            "lock" => {
                user_locks = match value.as_str() {
                    "get_lock" => true,
                    "table" => false,
                    other => {
                        let why = format!("lock={other} is not a lock mode (get_lock or table)");
                        return Err(usage(url, &why));
                    }
                }
            }
            "password" | "pass" => {
                return Err(usage(url, "give the password before '@' or in MYSQL_PWD"))
            }
            "require_ssl" | "verify_ca" | "verify_identity" | "built_in_roots" => {
                return Err(usage(url, "say ssl-mode=REQUIRED for TLS"))
            }
            _ => passed.push((name.as_str(), value.as_str())),
        }
    }
    let opts = client_opts(&u, &passed).map_err(|why| usage(url, &why))?;
    let db = opts
        .db_name()
        .map(str::to_string)
        .ok_or_else(|| usage(url, "name the database, e.g. mysql://host:3306/app"))?;
    let mut builder = OptsBuilder::from_opts(opts.clone());
    if opts.pass().is_none() {
        if let Some(p) = env_password.filter(|p| !p.is_empty()) {
            builder = builder.pass(Some(p));
        }
    }
    if opts.user().is_none() {
        builder = builder.user(login_name().or(Some("root".into())));
    }
    let opts = Opts::from(builder);
    let secret = opts.pass().map(str::to_string);
    let name = format!("mysql://{}:{}/{db}", opts.ip_or_hostname(), opts.tcp_port());
    Ok(Target {
        opts,
        name,
        table,
        tls,
        secret,
        user_locks,
    })
}

/// The client's settings from what dlock read, through the URL written again for the
/// client's own reader ([`Url::for_client`]); one server only.
fn client_opts(u: &Url, passed: &[(&str, &str)]) -> std::result::Result<Opts, String> {
    if u.hosts.len() > 1 {
        return Err("give one server".into());
    }
    Opts::from_url(&u.for_client("mysql", passed)?).map_err(|e| e.to_string())
}

/// Reads a URL with the password the environment gives.
pub fn parse(url: &str) -> Result<Target> {
    parse_with(url, std::env::var(crate::env::MYSQL_PWD).ok())
}

/// `DISABLED` and `PREFERRED` mean plain TCP; `REQUIRED`, `VERIFY_CA` and
/// `VERIFY_IDENTITY` mean TLS, always with the certificate and the host name verified
/// (as for PostgreSQL: dlock has no unverified mode), so `REQUIRED` is as strict as
/// `VERIFY_IDENTITY` here.
fn ssl_mode(url: &str, mode: &str) -> Result<bool> {
    match mode.to_ascii_uppercase().replace('-', "_").as_str() {
        "DISABLED" | "PREFERRED" => Ok(false),
        "REQUIRED" | "VERIFY_CA" | "VERIFY_IDENTITY" => Ok(true),
        _ => Err(usage(
            url,
            &format!("unknown ssl-mode '{mode}' (DISABLED, PREFERRED, REQUIRED, VERIFY_IDENTITY)"),
        )),
    }
}

fn login_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(url: &str) -> Result<Target> {
        parse_with(url, None)
    }

    #[test]
    fn urls() {
        let t = p("mysql://u:pw@db.example:3307/app?table=locks").unwrap();
        assert_eq!(t.name, "mysql://db.example:3307/app");
        assert_eq!(t.table, "locks");
        assert_eq!(t.opts.user(), Some("u"));
        assert_eq!(t.opts.pass(), Some("pw"));
        assert!(!t.tls);
        assert!(!format!("{t:?}").contains("pw"));
        let t = p("mariadb://h/d?ssl-mode=required").unwrap();
        assert!(t.tls);
        assert_eq!(t.table, DEFAULT_TABLE);
        assert_eq!(t.name, "mysql://h:3306/d");
        let t = parse_with("mysql://u@h/d", Some("envpw".into())).unwrap();
        assert_eq!(t.opts.pass(), Some("envpw"));
        assert_eq!(t.secret.as_deref(), Some("envpw"));
        let t = parse_with("mysql://u:p%40ss@h/d", Some("envpw".into())).unwrap();
        assert_eq!(t.opts.pass(), Some("p@ss"));
        for bad in [
            "mysql://h/d?table=Bad",
            "mysql://h/d?table=a;drop",
            "mysql://h/d?ssl-mode=sometimes",
            "mysql://h/d?nonsense=1",
            "mysql://h/d?password=x",
            "mysql://h/d?require_ssl=true",
            "mysql://h",
            "postgres://h/d",
        ] {
            assert_eq!(p(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
        let t = p("mysql://u:p@ss/w?rd%25,x@h:1/d").unwrap();
        assert_eq!(t.opts.pass(), Some("p@ss/w?rd%,x"));
        assert_eq!(t.name, "mysql://h:1/d");
        assert_eq!(p("mysql://h/d?table=a&table=b").unwrap_err().exit_code(), 2);
        let e = p("mysql://u:secret@h/d?ssl-mode=x")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("secret"), "{e}");
    }
}
