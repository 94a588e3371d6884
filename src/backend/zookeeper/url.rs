//! `zk://[user:password@]host[:port][,host[:port]…][/chroot]`: the servers of one
//! ensemble, the chroot every lock path lives under, and digest credentials; `zks://` the
//! same over TLS (to the servers' `secureClientPort`).

use crate::error::{Error, Result};

/// ZooKeeper's client port, when a host names none.
pub const DEFAULT_PORT: u16 = 2181;

/// The usual `secureClientPort` (ZooKeeper has no default), when a `zks://` host names none.
pub const DEFAULT_TLS_PORT: u16 = 2281;

/// What a `zk://` URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port` of each server.
    pub servers: Vec<String>,
    /// The chroot (`/a/b`), empty for the root.
    pub chroot: String,
    /// `zk://host:port,…[/chroot]`, for messages (never the password).
    pub name: String,
    /// `user:password` for the `digest` scheme.
    pub credentials: Option<(String, String)>,
    /// `zks://`: TLS to every server.
    pub tls: bool,
}

impl Target {
    /// The connection string the client takes: `host:port,…[/chroot]`.
    pub fn connect_string(&self) -> String {
        format!("{}{}", self.servers.join(","), self.chroot)
    }
}

fn usage(url: &str, why: &str) -> Error {
    Error::Usage(format!(
        "bad ZooKeeper URL {}: {why}",
        crate::config::redact_url(url)
    ))
}

/// Reads a `zk://` or `zks://` URL.
pub fn parse(url: &str) -> Result<Target> {
    let (scheme, rest, port) = match (url.strip_prefix("zk://"), url.strip_prefix("zks://")) {
        (Some(rest), _) => ("zk", rest, DEFAULT_PORT),
        (_, Some(rest)) => ("zks", rest, DEFAULT_TLS_PORT),
        _ => return Err(usage(url, "it must start with zk:// or zks://")),
    };
    if rest.contains('?') {
        return Err(usage(url, "it takes no parameters"));
    }
    let (authority, chroot) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, password)) if !user.is_empty() => {
                (Some((user.to_string(), password.to_string())), hosts)
            }
            _ => {
                return Err(usage(
                    url,
                    "give both user and password: zk://USER:PASSWORD@…",
                ))
            }
        },
        None => (None, authority),
    };
    let chroot = chroot.trim_end_matches('/');
    if !chroot.is_empty() {
        super::layout::check_path(chroot)
            .and_then(|()| super::layout::check_not_own_tree(chroot))
            .map_err(|why| usage(url, &format!("chroot {why}")))?;
    }
    let mut servers = Vec::new();
    for host in hosts.split(',').map(str::trim) {
        match host.rsplit_once(':') {
            _ if host.is_empty() => return Err(usage(url, "it names no host")),
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => {
                servers.push(host.to_string())
            }
            Some(_) => return Err(usage(url, &format!("bad port in '{host}'"))),
            None => servers.push(format!("{host}:{port}")),
        }
    }
    Ok(Target {
        name: format!("{scheme}://{}{chroot}", servers.join(",")),
        servers,
        chroot: chroot.to_string(),
        credentials,
        tls: scheme == "zks",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse("zk://a:1,b").unwrap();
        assert_eq!(t.servers, ["a:1", "b:2181"]);
        assert_eq!(t.chroot, "");
        assert_eq!(t.name, "zk://a:1,b:2181");
        let t = parse("zk://a/x/y/").unwrap();
        assert_eq!(t.chroot, "/x/y");
        assert_eq!(t.connect_string(), "a:2181/x/y");
        for bad in [
            "zk://",
            "zk://a:x",
            "zk://a//b",
            "zk://a?x=1",
            "zk://a/x/../y",
            "zk://a/zookeeper",
            "zk://a/zookeeper/x",
            "zk://a/🔒",
            "zk://a/x\u{e000}",
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
        let t = parse("zk://u:p@ss@a:1,b:2/c").unwrap();
        assert_eq!(t.credentials, Some(("u".into(), "p@ss".into())));
        assert_eq!(t.servers, ["a:1", "b:2"]);
        assert!(!t.name.contains("p@ss"));
        let e = parse("zk://u:secret@a:x").unwrap_err().to_string();
        assert!(!e.contains("secret"), "{e}");
        assert!(parse("zk://nopassword@a").is_err());
        let t = parse("zks://a,b:9/c").unwrap();
        assert!(t.tls && !parse("zk://a").unwrap().tls);
        assert_eq!(t.servers, ["a:2281", "b:9"]);
        assert_eq!(t.name, "zks://a:2281,b:9/c");
    }
}
