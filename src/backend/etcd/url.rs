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
    crate::backend::url::bad("etcd", url, why)
}

/// Reads an `etcd://` URL.
pub fn parse(url: &str) -> Result<Target> {
    let u = crate::backend::url::parse(url).map_err(|why| usage(url, &why))?;
    let tls = match u.scheme.as_str() {
        "etcd" => false,
        "etcds" => true,
        _ => return Err(usage(url, "it must start with etcd:// or etcds://")),
    };
    let credentials = u
        .both_credentials("etcd://")
        .map_err(|why| usage(url, &why))?;
    if !matches!(u.path.as_str(), "" | "/") || u.fragment.is_some() {
        return Err(usage(
            url,
            "a path is not used; give ?prefix=P for a key prefix",
        ));
    }
    u.only_params(&["prefix"]).map_err(|why| usage(url, &why))?;
    if u.hosts.is_empty() {
        return Err(usage(url, "it names no host"));
    }
    let endpoints: Vec<String> = u.hosts.iter().map(|h| h.addr(DEFAULT_PORT)).collect();
    Ok(Target {
        name: format!("{}://{}", u.scheme, endpoints.join(",")),
        endpoints,
        prefix: u.param("prefix").unwrap_or_default().to_string(),
        credentials,
        tls,
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
        assert_eq!(
            parse("etcd://a?prefix=j%C3%B6bs%2F").unwrap().prefix,
            "jöbs/"
        );
        assert!(parse("etcd://a?prefix=x&prefix=y").is_err());
        let t = parse("etcd://u:p?ss/w#rd@a").unwrap();
        assert_eq!(t.credentials, Some(("u".into(), "p?ss/w#rd".into())));
        let e = parse("etcd://u:s%zzecret@a").unwrap_err().to_string();
        assert!(
            e.contains("bad escape in the password") && !e.contains("ecret"),
            "{e}"
        );
    }
}
