//! The one reading of a store URL and the one rule for showing it.
//!
//! `scheme://[user[:password]@]host[:port][,host[:port]…][/path][?name=value&…][#fragment]`.
//! A password is whatever people paste, so the credentials end at the LAST `@` after
//! `://` (an `@`, `/`, `?`, `#`, `:` or `,` of a password needs no escape); the hosts
//! end at the first `/`, `?` or `#` after that `@`. So an `@` in the path or the query
//! must be written `%40` (a URL whose text after `://` starts with `/`, such as
//! `redis+unix:///path`, has no credentials and may hold `@` anywhere). User and password
//! are `%XX`-decoded, and so are query names and values (`+` stays `+`); a parameter given
//! twice is refused. Each store turns a [`Url`] into its own typed target (its `url.rs`).
//!
//! [`redact`] is how any URL is shown: nothing between `://` and that last `@` when there
//! is a password (or when the URL cannot be read), `user@` when there is only a user, and
//! `pass=`/`password=` values as `***`. Parse errors never quote the credentials.
//! [`one_line`] is the last scrub of a message that may quote a password.

use crate::error::Error;

/// One host of the authority; `[::1]` is given as `::1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub port: Option<u16>,
}

impl Host {
    /// `host:port` (`[v6]:port`), with `default` when the URL names no port.
    pub fn addr(&self, default: u16) -> String {
        let port = self.port.unwrap_or(default);
        if self.name.contains(':') {
            format!("[{}]:{port}", self.name)
        } else {
            format!("{}:{port}", self.name)
        }
    }
}

/// A store URL, read once.
#[derive(Clone, PartialEq, Eq)]
pub struct Url {
    /// As written before `://`.
    pub scheme: String,
    /// `None` without credentials or with an empty user (`:password@`).
    pub user: Option<String>,
    /// `None` without a `:` in the credentials; never printed.
    pub password: Option<String>,
    /// Empty entries of the list are skipped.
    pub hosts: Vec<Host>,
    /// Raw (not decoded), from the `/` after the hosts up to `?` or `#`; may be empty.
    pub path: String,
    /// Decoded, in order, each name once.
    pub query: Vec<(String, String)>,
    pub fragment: Option<String>,
}

impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Url")
            .field("scheme", &self.scheme)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .field("fragment", &self.fragment)
            .finish_non_exhaustive()
    }
}

impl Url {
    /// The value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Refuses any query parameter not in `known`, naming it and the known ones.
    pub fn only_params(&self, known: &[&str]) -> Result<(), String> {
        match self
            .query
            .iter()
            .find(|(n, _)| !known.contains(&n.as_str()))
        {
            None => Ok(()),
            Some((name, _)) if known.is_empty() => Err(format!(
                "unknown parameter '{}' (this URL takes none)",
                printable(name)
            )),
            Some((name, _)) => Err(format!(
                "unknown parameter '{}' (known: {})",
                printable(name),
                known.join(", ")
            )),
        }
    }

    /// User and password, both or neither (`None`); one without the other is refused with
    /// `example` (`zk://`) shown as the way to give them.
    pub fn both_credentials(&self, example: &str) -> Result<Option<(String, String)>, String> {
        match (&self.user, &self.password) {
            (None, None) => Ok(None),
            (Some(user), Some(password)) => Ok(Some((user.clone(), password.clone()))),
            _ => Err(format!(
                "give both user and password: {example}USER:PASSWORD@…"
            )),
        }
    }

    /// The URL written again as `scheme://` for a client library that reads URLs itself,
    /// every part escaped so that it reads exactly what dlock did: the credentials, the
    /// hosts, at most one path segment (the database) and `passed` as the query.
    pub fn for_client(&self, scheme: &str, passed: &[(&str, &str)]) -> Result<String, String> {
        let mut text = format!("{scheme}://");
        if self.user.is_some() || self.password.is_some() {
            text.push_str(&percent_encode(self.user.as_deref().unwrap_or_default()));
            if let Some(password) = &self.password {
                text.push(':');
                text.push_str(&percent_encode(password));
            }
            text.push('@');
        }
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|h| match h.port {
                Some(_) => h.addr(0),
                None if h.name.contains(':') => format!("[{}]", h.name),
                None => h.name.clone(),
            })
            .collect();
        text.push_str(&hosts.join(","));
        match self.segments()?.as_slice() {
            [] => {}
            [db] => text.push_str(&format!("/{}", percent_encode(db))),
            _ if self.hosts.len() > 1 => {
                return Err("expected at most /DATABASE after the hosts".into())
            }
            _ => return Err("expected at most /DATABASE after the host".into()),
        }
        let params: Vec<String> = passed
            .iter()
            .map(|(n, v)| format!("{}={}", percent_encode(n), percent_encode(v)))
            .collect();
        if !params.is_empty() {
            text.push('?');
            text.push_str(&params.join("&"));
        }
        Ok(text)
    }

    /// The path's segments between `/`, empty ones skipped, each `%XX`-decoded.
    pub fn segments(&self) -> Result<Vec<String>, String> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_decode(s).ok_or_else(|| "bad escape in the path".to_string()))
            .collect()
    }
}

/// The raw pieces of a URL, before anything is decoded.
struct Parts<'a> {
    scheme: &'a str,
    /// Between `://` and the last `@`, when there is one.
    userinfo: Option<&'a str>,
    authority: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

fn split(url: &str) -> Option<Parts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    if !is_scheme(scheme) {
        return None;
    }
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) if !rest.starts_with('/') => (Some(&rest[..at]), &rest[at + 1..]),
        _ => (None, rest),
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, after) = after.split_at(end);
    let (after, fragment) = match after.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (after, None),
    };
    let (path, query) = match after.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (after, None),
    };
    Some(Parts {
        scheme,
        userinfo,
        authority,
        path,
        query,
        fragment,
    })
}

/// True for a scheme as RFC 3986 spells one (so a `://` inside a password is no scheme).
pub fn is_scheme(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Reads `url`, for a store's `url.rs` to turn into its typed target. The error is a
/// reason to put after the redacted URL; it never holds a piece of the credentials.
pub fn parse(url: &str) -> Result<Url, String> {
    #[cfg(test)]
    READS.with(|n| n.set(n.get() + 1));
    read(url)
}

#[cfg(test)]
thread_local! {
    /// How many times this thread read a URL for a store ([`parse`]): a test that checks
    /// a URL and then opens it sees that opening reads nothing again.
    pub(crate) static READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// [`parse`], for the module's own rules (showing a URL is not reading it for a store).
fn read(url: &str) -> Result<Url, String> {
    let parts = split(url).ok_or("no scheme (scheme://…)")?;
    let (user, password) = match parts.userinfo {
        None => (None, None),
        Some(info) => {
            let (user, password) = match info.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (info, None),
            };
            let user = percent_decode(user).ok_or("bad escape in the user name")?;
            let password = password
                .map(|p| percent_decode(p).ok_or("bad escape in the password"))
                .transpose()?;
            (Some(user).filter(|u| !u.is_empty()), password)
        }
    };
    Ok(Url {
        scheme: parts.scheme.to_string(),
        user,
        password,
        hosts: hosts(parts.authority)?,
        path: parts.path.to_string(),
        query: query(parts.query.unwrap_or(""))?,
        fragment: parts.fragment.map(str::to_string),
    })
}

fn hosts(authority: &str) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for node in authority
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let (name, port) = if let Some(v6) = node.strip_prefix('[') {
            let (name, after) = v6.split_once(']').ok_or("unclosed '[' in a host")?;
            match after {
                "" => (name, None),
                _ => match after.strip_prefix(':') {
                    Some(p) => (name, Some(p)),
                    None => return Err(format!("bad host '{}'", printable(node))),
                },
            }
        } else {
            match node.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (node, None),
            }
        };
        if name.is_empty() {
            return Err("a host is empty".into());
        }
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("bad host '{}'", printable(name)));
        }
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .map_err(|_| format!("bad port '{}'", printable(p)))?,
            ),
        };
        let name = name.to_string();
        hosts.push(Host { name, port });
    }
    Ok(hosts)
}

fn query(query: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_decode(name).ok_or("bad escape in a parameter name")?;
        let value = percent_decode(value)
            .ok_or_else(|| format!("bad escape in the value of '{}'", printable(&name)))?;
        if pairs.iter().any(|(n, _)| *n == name) {
            return Err(format!("parameter '{}' is given twice", printable(&name)));
        }
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// Decodes `%XX` escapes; `None` when one is malformed or the result is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Escapes every byte outside RFC 3986's unreserved set, for handing a value to a client
/// library that reads URLs itself.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `s` as quoted in a one-line message: control characters escaped.
fn printable(s: &str) -> String {
    s.chars().flat_map(char::escape_debug).collect()
}

/// True for a query parameter that carries a password.
fn secret_param(name: &str) -> bool {
    let name = percent_decode(name).unwrap_or_default();
    name == "pass" || name == "password"
}

/// `url` as it may be shown anywhere: see the module documentation.
pub fn redact(url: &str) -> String {
    let Some(parts) = split(url) else {
        return match url.rfind('@') {
            Some(at) => format!("***{}", &url[at..]),
            None => url.to_string(),
        };
    };
    let readable = read(url).is_ok_and(|u| u.password.is_none());
    let userinfo = match parts.userinfo {
        None => String::new(),
        Some(info) if readable => format!("{info}@"),
        Some(_) => "***@".to_string(),
    };
    let query = parts.query.map_or(String::new(), |q| {
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if secret_param(name) => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        format!("?{}", pairs.join("&"))
    });
    let fragment = parts.fragment.map_or(String::new(), |f| format!("#{f}"));
    format!(
        "{}://{userinfo}{}{}{query}{fragment}",
        parts.scheme, parts.authority, parts.path
    )
}

/// `url` without its password, for a child's environment: `user:password@` becomes
/// `user@` (`:password@` goes entirely), `pass=`/`password=` pairs are dropped. A URL
/// that cannot be split is given back as it is when it has no `@`, else without
/// everything before its last `@`.
pub fn strip_password(url: &str) -> String {
    let Some(parts) = split(url) else {
        return match url.rfind('@') {
            Some(at) => url[at + 1..].to_string(),
            None => url.to_string(),
        };
    };
    let user = parts
        .userinfo
        .map(|info| info.split_once(':').map_or(info, |(user, _)| user))
        .filter(|u| !u.is_empty())
        .map_or(String::new(), |u| format!("{u}@"));
    let pairs: Vec<&str> = parts
        .query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| !secret_param(p.split_once('=').map_or(*p, |(k, _)| k)))
        .collect();
    let query = match pairs.is_empty() {
        true => String::new(),
        false => format!("?{}", pairs.join("&")),
    };
    let fragment = parts.fragment.map_or(String::new(), |f| format!("#{f}"));
    format!(
        "{}://{user}{}{}{query}{fragment}",
        parts.scheme, parts.authority, parts.path
    )
}

/// `msg` on one line, with each of `secrets` (passwords) replaced by `***` as a last line
/// of defence wherever it stands as a whole part: not glued to a letter, digit or `_` on
/// an end where the secret itself has one, and not a URL's scheme. So a password `p` is
/// scrubbed from `u:p@h` and `password=p` but leaves `postgres://` readable, while one of
/// punctuation goes wherever it stands.
pub fn one_line<S: AsRef<str>>(msg: &str, secrets: &[S]) -> String {
    let mut msg = msg.replace(['\r', '\n'], " ");
    for secret in secrets.iter().map(AsRef::as_ref).filter(|s| !s.is_empty()) {
        msg = scrub(&msg, secret);
    }
    msg
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `msg` with every whole-part occurrence of `secret` (see [`one_line`]) as `***`.
fn scrub(msg: &str, secret: &str) -> String {
    let word_start = secret.starts_with(is_word);
    let word_end = secret.ends_with(is_word);
    let scheme_like = secret
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let mut out = String::with_capacity(msg.len());
    let mut prev: Option<char> = None;
    let mut rest = msg;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix(secret) {
            let left = !word_start || !prev.is_some_and(is_word);
            let right = !word_end || !after.starts_with(is_word);
            let scheme = scheme_like && after.starts_with("://");
            if left && right && !scheme {
                out.push_str("***");
                prev = secret.chars().next_back();
                rest = after;
                continue;
            }
        }
        out.push(c);
        prev = Some(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The usage error (exit 2) for a bad URL of `kind`: `bad KIND URL <redacted>: WHY`.
pub fn bad(kind: &str, url: &str, why: &str) -> Error {
    Error::Usage(format!("bad {kind} URL {}: {why}", redact(url)))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod props;
