//! `memcached://host[:port]`: the one server a store talks to.

use crate::error::{Error, Result};

/// Memcached's port, when the URL names none.
pub const DEFAULT_PORT: u16 = 11211;

/// What a `memcached://` URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port`.
    pub addr: String,
    /// `memcached://host:port`, for messages.
    pub name: String,
}

fn usage(url: &str, why: &str) -> Error {
    crate::backend::url::bad("memcached", url, why)
}

/// Reads a `memcached://` URL.
pub fn parse(url: &str) -> Result<Target> {
    let u = crate::backend::url::parse(url).map_err(|why| usage(url, &why))?;
    if u.scheme != "memcached" {
        return Err(usage(url, "it must start with memcached://"));
    }
    if u.user.is_some() || u.password.is_some() {
        // Memcached's text protocol has no authentication: a password would be sent nowhere.
        return Err(usage(
            url,
            "memcached has no passwords (SASL is not supported)",
        ));
    }
    u.only_params(&[]).map_err(|why| usage(url, &why))?;
    let host = match u.hosts.as_slice() {
        [] => return Err(usage(url, "it names no host")),
        [host] if matches!(u.path.as_str(), "" | "/") && u.fragment.is_none() => host,
        _ => return Err(usage(
            url,
            "give one host:port per URL (several memcached:// URLs, comma-separated or repeated, form a quorum)",
        )),
    };
    let addr = host.addr(DEFAULT_PORT);
    Ok(Target {
        name: format!("memcached://{addr}"),
        addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse("memcached://a").unwrap();
        assert_eq!(t.addr, "a:11211");
        assert_eq!(t.name, "memcached://a:11211");
        assert_eq!(
            parse("memcached://127.0.0.1:9/").unwrap().addr,
            "127.0.0.1:9"
        );
        for bad in [
            "memcached://",
            "memcached://a:x",
            "memcached://a/b",
            "memcached://a?x=1",
            "memcached://u:pw@a",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(!e.to_string().contains("pw"), "{e}");
        }
    }
}
