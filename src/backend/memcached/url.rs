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
    Error::Usage(format!(
        "bad memcached URL {}: {why}",
        crate::config::redact_url(url)
    ))
}

/// Reads a `memcached://` URL.
pub fn parse(url: &str) -> Result<Target> {
    let rest = url
        .strip_prefix("memcached://")
        .ok_or_else(|| usage(url, "it must start with memcached://"))?;
    let host = rest.strip_suffix('/').unwrap_or(rest);
    if host.contains('@') {
        // Memcached's text protocol has no authentication: a password would be sent nowhere.
        return Err(usage(
            url,
            "memcached has no passwords (SASL is not supported)",
        ));
    }
    if host.contains(['/', '?', ',']) {
        return Err(usage(
            url,
            "give one host:port per URL (several memcached:// URLs, comma-separated or repeated, form a quorum)",
        ));
    }
    let addr = match host.rsplit_once(':') {
        _ if host.is_empty() => return Err(usage(url, "it names no host")),
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => host.to_string(),
        Some(_) => return Err(usage(url, &format!("bad port in '{host}'"))),
        None => format!("{host}:{DEFAULT_PORT}"),
    };
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
