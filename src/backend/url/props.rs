//! Property: whatever a password holds, written raw or `%XX`-escaped, on every scheme,
//! neither the shown URL nor the error of a bad URL nor the spec of a good one (the
//! name `status` and every message give its store) nor a child's `DLOCK_URL` nor a
//! client's message scrubbed by [`one_line`] holds it or a piece of it.

use proptest::prelude::*;

use super::{one_line, percent_encode, redact};
use crate::backend::spec::BackendSpec;
use crate::backend::target::Target;

/// Every scheme with credentials before the hosts: `{p}` is the password.
const TEMPLATES: &[&str] = &[
    "redis://u:{p}@127.0.0.1:1/0",
    "rediss://u:{p}@127.0.0.1:1",
    "redis+sentinel://u:{p}@s1:1,s2/m",
    "rediss+sentinel://:{p}@s1/m/1",
    "redis+cluster://u:{p}@a:1,b:2",
    "rediss+cluster://:{p}@a:1",
    "etcd://u:{p}@a:1,b?prefix=x",
    "etcds://u:{p}@a:1",
    "zk://u:{p}@a:1,b/chroot",
    "zks://u:{p}@a:1",
    "postgres://u:{p}@h:1/db",
    "postgresql://u:{p}@h:1/db?sslmode=require",
    "mysql://u:{p}@h:1/db",
    "mariadb://u:{p}@h:1/db",
    "memcached://u:{p}@h:1",
    "u:{p}@127.0.0.1:1",
    "redis:/u:{p}@127.0.0.1:1",
];

/// Ways to make a URL bad after its credentials, so that its error is printed too.
const SPOILERS: &[(&str, &str)] = &[("", ""), (":1", ":x1"), ("@", "@[::1")];

/// Characters of a password. Windows holding a marker (an upper-case letter or a
/// non-ASCII character, which no message or template holds) are the pieces looked for;
/// punctuation alone (`://`) is in every message anyway.
fn password() -> impl Strategy<Value = String> {
    let specials = prop::sample::select(vec![
        '/', '?', '#', '@', ':', '%', ',', ' ', '&', '=', '+', '[', ']', '.',
    ]);
    let markers = prop::sample::select(vec!['Q', 'X', 'J', 'W', 'é', 'ж', '🔒', '中', '\u{e000}']);
    let any = any::<char>().prop_filter("a marker", |c| !c.is_ascii());
    let c = prop_oneof![3 => specials, 3 => markers, 1 => any];
    prop::collection::vec(c, 1..24).prop_map(|cs| cs.into_iter().collect())
}

fn is_marker(c: char) -> bool {
    c.is_ascii_uppercase() || !c.is_ascii()
}

/// The password's pieces of 3 or more characters that hold a marker.
fn pieces(password: &str) -> Vec<String> {
    let chars: Vec<char> = password.chars().collect();
    let mut out = Vec::new();
    for w in chars.windows(3) {
        if w.iter().any(|c| is_marker(*c)) {
            out.push(w.iter().collect());
        }
    }
    out
}

fn leaks(text: &str, password: &str) -> Option<String> {
    if password.chars().count() >= 3 && password.chars().any(is_marker) && text.contains(password) {
        return Some(password.to_string());
    }
    pieces(password)
        .into_iter()
        .find(|p| text.contains(p.as_str()))
}

/// How a spec shows itself, and the names its stores give themselves in `status`.
fn described(spec: &BackendSpec) -> String {
    let targets = match spec {
        BackendSpec::Local(_) => vec![],
        BackendSpec::One(t) => vec![t.clone()],
        BackendSpec::Quorum(ts) => ts.clone(),
    };
    let names: Vec<String> = targets.iter().map(Target::describe).collect();
    format!("{spec:?} {}", names.join(" "))
}

fn check(url: &str, password: &str) -> Result<(), TestCaseError> {
    let shown = redact(url);
    let (error, status) = match BackendSpec::from_urls(&[url.to_string()]) {
        Ok(spec) => (String::new(), described(&spec)),
        Err(e) => (e.to_string(), String::new()),
    };
    let child = crate::credentials::strip(url);
    let texts = [
        ("redact", &shown),
        ("error", &error),
        ("status", &status),
        ("child", &child),
    ];
    for (what, text) in texts {
        if let Some(piece) = leaks(text, password) {
            return Err(TestCaseError::fail(format!(
                "{what} of {url:?} shows {piece:?}: {text}"
            )));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_password_in_any_message(
        password in password(),
        encoded in any::<bool>(),
        template in prop::sample::select(TEMPLATES),
        spoiler in prop::sample::select(SPOILERS),
        suffix in prop::sample::select(vec!["", "?bogus=1", "?a=1&a=2"]),
    ) {
        let written = if encoded { percent_encode(&password) } else { password.clone() };
        let (from, to) = spoiler;
        let url = template.replacen(from, to, 1).replace("{p}", &written);
        let url = match (suffix, url.contains('?')) {
            ("", _) => url,
            (s, true) => format!("{url}&{}", &s[1..]),
            (s, false) => format!("{url}{s}"),
        };
        check(&url, &password)?;
        // A client's message that quotes the URL as written, and the password alone.
        if !encoded {
            let line = one_line(&format!("{url}: refused\n'{password}' ({password})"), &[&password]);
            if let Some(piece) = leaks(&line, &password) {
                return Err(TestCaseError::fail(format!("one_line shows {piece:?}: {line}")));
            }
        }
    }

    #[test]
    fn no_password_in_a_unix_socket_url(password in password(), raw in any::<bool>()) {
        // In a query, '&', '#' and '%' are syntax: they must be escaped.
        let written = if raw && !password.contains(['&', '#', '%']) {
            password.clone()
        } else {
            percent_encode(&password)
        };
        for url in [
            format!("redis+unix:///r.sock?db=1&pass={written}"),
            format!("redis+unix:///r.sock?pass={written}&bogus=1"),
            format!("unix:///r.sock?pass={written}&db=x"),
        ] {
            check(&url, &password)?;
        }
    }
}
