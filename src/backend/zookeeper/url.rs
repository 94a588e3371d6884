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
    crate::backend::url::bad("ZooKeeper", url, why)
}

/// Reads a `zk://` or `zks://` URL.
pub fn parse(url: &str) -> Result<Target> {
    let u = crate::backend::url::parse(url).map_err(|why| usage(url, &why))?;
    let (tls, port) = match u.scheme.as_str() {
        "zk" => (false, DEFAULT_PORT),
        "zks" => (true, DEFAULT_TLS_PORT),
        _ => return Err(usage(url, "it must start with zk:// or zks://")),
    };
    if !u.query.is_empty() || u.fragment.is_some() {
        return Err(usage(url, "it takes no parameters"));
    }
    let credentials = u
        .both_credentials("zk://")
        .map_err(|why| usage(url, &why))?;
    let chroot = u.path.trim_end_matches('/');
    if !chroot.is_empty() {
        super::layout::check_path(chroot)
            .and_then(|()| super::layout::check_not_own_tree(chroot))
            .map_err(|why| usage(url, &format!("chroot {why}")))?;
    }
    if u.hosts.is_empty() {
        return Err(usage(url, "it names no host"));
    }
    let servers: Vec<String> = u.hosts.iter().map(|h| h.addr(port)).collect();
    Ok(Target {
        name: format!("{}://{}{chroot}", u.scheme, servers.join(",")),
        servers,
        chroot: chroot.to_string(),
        credentials,
        tls,
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
        let t = parse("zk://u:s3cr/e?t%25@a:1/c").unwrap();
        assert_eq!(t.credentials, Some(("u".into(), "s3cr/e?t%".into())));
        assert_eq!(t.chroot, "/c");
        let t = parse("zk://u:p%2Fw%3F%25%40@a").unwrap();
        assert_eq!(t.credentials, Some(("u".into(), "p/w?%@".into())));
        let e = parse("zk://u:s3cr/et@127.0.0.1:x").unwrap_err().to_string();
        assert!(!e.contains("s3cr") && !e.contains("et@"), "{e}");
        let t = parse("zks://a,b:9/c").unwrap();
        assert!(t.tls && !parse("zk://a").unwrap().tls);
        assert_eq!(t.servers, ["a:2281", "b:9"]);
        assert_eq!(t.name, "zks://a:2281,b:9/c");
    }
}
