//! `etcd://host[:port][,host[:port]…][/][?prefix=P]`: the endpoints of one cluster and
//! the prefix put before every lock name; `etcds://` the same over TLS.

use crate::error::{Error, Result};

/// etcd's client port, when a host names none.
pub const DEFAULT_PORT: u16 = 2379;

/// What an `etcd://` URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port` of each endpoint.
    pub endpoints: Vec<String>,
    /// The prefix of lock keys: empty by default, as `etcdctl lock NAME` uses `NAME/`.
    pub prefix: String,
    /// `etcd://host:port,…`, for messages.
    pub name: String,
    /// User and password (`etcd://user:password@…`), for a cluster with auth on.
    pub credentials: Option<(String, String)>,
    /// `etcds://`: every endpoint is spoken to over TLS.
    pub tls: bool,
}

fn usage(url: &str, why: &str) -> Error {
    Error::Usage(format!(
        "bad etcd URL {}: {why}",
        crate::config::redact_url(url)
    ))
}

/// The user and password of a URL, `%XX` escapes decoded (a password may hold `@` or `:`).
fn userinfo_of(url: &str, user: &str, password: &str) -> Result<(String, String)> {
    let decode = |s: &str, what: &str| {
        crate::config::percent_decode(s)
            .ok_or_else(|| usage(url, &format!("bad escape in the {what}")))
    };
    Ok((decode(user, "user")?, decode(password, "password")?))
}

/// Reads an `etcd://` URL.
pub fn parse(url: &str) -> Result<Target> {
    let (scheme, rest) = match url.strip_prefix("etcds://") {
        Some(rest) => ("etcds", rest),
        None => (
            "etcd",
            url.strip_prefix("etcd://")
                .ok_or_else(|| usage(url, "it must start with etcd:// or etcds://"))?,
        ),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (credentials, hosts) = match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, password)) if !user.is_empty() => {
                (Some(userinfo_of(url, user, password)?), hosts)
            }
            _ => {
                return Err(usage(
                    url,
                    "give both user and password: etcd://USER:PASSWORD@…",
                ))
            }
        },
        None => (None, rest),
    };
    if hosts.contains('/') {
        return Err(usage(
            url,
            "a path is not used; give ?prefix=P for a key prefix",
        ));
    }
    let mut endpoints = Vec::new();
    for host in hosts.split(',').map(str::trim) {
        match host.rsplit_once(':') {
            _ if host.is_empty() => return Err(usage(url, "it names no host")),
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => {
                endpoints.push(host.to_string())
            }
            Some(_) => return Err(usage(url, &format!("bad port in '{host}'"))),
            None => endpoints.push(format!("{host}:{DEFAULT_PORT}")),
        }
    }
    let mut prefix = String::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("prefix", p)) => prefix = p.to_string(),
            _ => {
                return Err(usage(
                    url,
                    &format!("unknown parameter '{pair}' (known: prefix)"),
                ))
            }
        }
    }
    Ok(Target {
        name: format!("{scheme}://{}", endpoints.join(",")),
        endpoints,
        prefix,
        credentials,
        tls: scheme == "etcds",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse("etcd://a:1,b").unwrap();
        assert_eq!(t.endpoints, ["a:1", "b:2379"]);
        assert_eq!(t.prefix, "");
        assert_eq!(t.name, "etcd://a:1,b:2379");
        assert_eq!(parse("etcd://a/?prefix=locks/").unwrap().prefix, "locks/");
        assert!(!t.tls);
        let t = parse("etcds://a:1,b").unwrap();
        assert!(t.tls);
        assert_eq!(t.name, "etcds://a:1,b:2379");
        for bad in [
            "etcd://",
            "etcd://a:x",
            "etcd://a/b",
            "etcd://a?x=1",
            "etcdx://a",
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
        let t = parse("etcd://u:p@ss@a:1,b:2").unwrap();
        assert_eq!(t.credentials, Some(("u".into(), "p@ss".into())));
        assert_eq!(t.endpoints, ["a:1", "b:2"]);
        assert!(!t.name.contains("p@ss"));
        let e = parse("etcd://u:secret@a:x").unwrap_err().to_string();
        assert!(!e.contains("secret"), "{e}");
        assert!(parse("etcd://nopassword@a").is_err());
        let t = parse("etcd://us%65r:p%40ss%3Aw%25rd@a").unwrap();
        assert_eq!(t.credentials, Some(("user".into(), "p@ss:w%rd".into())));
        let e = parse("etcd://u:s%zzecret@a").unwrap_err().to_string();
        assert!(
            e.contains("bad escape in the password") && !e.contains("ecret"),
            "{e}"
        );
    }
}
