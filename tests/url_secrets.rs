//! No password, nor a piece of one, in what `dlock` prints about a URL it cannot use,
//! whatever the password holds, on every scheme: the real binary, a bad URL (exit 2) or
//! a port nobody listens on (exit 69); nor in its log lines (`-vv`, text and JSON), its
//! status or a child's environment when the URL works.

use std::net::TcpListener;
use std::process::Output;

use crate::support::dlock;

/// Passwords users paste, each with characters a URL gives a meaning to.
const NASTY: &[&str] = &[
    "Pa/SS",
    "S3cr/Et?#x",
    "P@ss:W%rd",
    "QQ,XX YY",
    "Jé🔒中/?#@:%, W",
    "%2FEnc%2CW",
];

/// Every scheme; `{p}` is the password as written, `{port}` a closed port.
const TEMPLATES: &[&str] = &[
    "redis://u:{p}@127.0.0.1:{port}/0",
    "rediss://:{p}@127.0.0.1:{port}",
    "redis+sentinel://u:{p}@127.0.0.1:{port}/m",
    "rediss+sentinel://u:{p}@127.0.0.1:{port}/m",
    "redis+cluster://u:{p}@127.0.0.1:{port}",
    "rediss+cluster://u:{p}@127.0.0.1:{port}",
    "etcd://u:{p}@127.0.0.1:{port}",
    "etcds://u:{p}@127.0.0.1:{port}",
    "zk://u:{p}@127.0.0.1:{port}/c",
    "zks://u:{p}@127.0.0.1:{port}",
    "postgres://u:{p}@127.0.0.1:{port}/db",
    "postgresql://u:{p}@127.0.0.1:{port}/db",
    "mysql://u:{p}@127.0.0.1:{port}/db",
    "mariadb://u:{p}@127.0.0.1:{port}/db",
    "memcached://u:{p}@127.0.0.1:{port}",
];

/// A port that was free a moment ago: bound, then closed.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The password's pieces of 3 characters that hold an upper-case or non-ASCII character
/// (none of dlock's own words do), and the password itself.
fn pieces(password: &str) -> Vec<String> {
    let chars: Vec<char> = password.chars().collect();
    let marked = |w: &[char]| w.iter().any(|c| c.is_ascii_uppercase() || !c.is_ascii());
    let mut out: Vec<String> = chars
        .windows(3)
        .filter(|w| marked(w))
        .map(|w| w.iter().collect())
        .collect();
    out.push(password.to_string());
    out
}

/// `dlock -u URL ARGS…` with no password from the environment.
fn run(url: &str, args: &[&str]) -> Output {
    let mut c = dlock();
    for var in [
        "PGPASSWORD",
        "MYSQL_PWD",
        "REDISCLI_AUTH",
        "DLOCK_SENTINEL_PASSWORD",
    ] {
        c.env_remove(var);
    }
    c.args(["-u", url]).args(args).output().unwrap()
}

fn status(url: &str) -> Output {
    run(url, &["status"])
}

/// All that `out` printed, stdout then stderr; it must show no piece of `password`.
fn shown(url: &str, password: &str, out: &Output) -> String {
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for piece in pieces(password) {
        assert!(!all.contains(&piece), "{url}: shows {piece:?}: {all}");
    }
    all
}

fn check(url: &str, password: &str, codes: &[i32]) {
    let out = status(url);
    let all = shown(url, password, &out);
    let code = out.status.code().unwrap_or(-1);
    assert!(codes.contains(&code), "{url}: exit {code}: {all}");
    assert_eq!(all.trim_end().lines().count(), 1, "{url}: one line: {all}");
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn url_passwords_never_show_in_errors_on_any_scheme() {
    let port = closed_port().to_string();
    let mut cases = Vec::new();
    for template in TEMPLATES {
        for password in NASTY {
            let url = |p: &str| template.replace("{p}", p).replace("{port}", &port);
            let memcached = template.starts_with("memcached");
            // Reachable URLs fail to connect (69); memcached takes no password (2).
            let reached: &[i32] = if memcached { &[2] } else { &[2, 69] };
            cases.push((url(password), password.to_string(), reached));
            cases.push((url(&encode(password)), password.to_string(), reached));
            let bogus = if template.contains('?') {
                "&bogus=1"
            } else {
                "?bogus=1"
            };
            cases.push((url(password) + bogus, password.to_string(), &[2][..]));
        }
    }
    // Without the Redis store, each URL above is refused whole (2) before it is read.
    for password in NASTY.iter().filter(|_| cfg!(feature = "redis")) {
        let url = format!("redis+unix:///nonexistent/r.sock?pass={}", encode(password));
        cases.push((url.clone(), password.to_string(), &[69][..]));
        cases.push((url + "&bogus=1", password.to_string(), &[2][..]));
    }
    std::thread::scope(|s| {
        for chunk in cases.chunks(cases.len().div_ceil(4)) {
            s.spawn(move || {
                for (url, password, codes) in chunk {
                    check(url, password, codes);
                }
            });
        }
    });
}

/// The most `dlock` says: every event and renewal, as text lines and as JSON objects.
const LOUD: [&[&str]; 2] = [&["-vv"], &["-vv", "--log-format", "json"]];

#[test]
fn url_passwords_never_show_in_log_lines_on_any_scheme() {
    let port = closed_port().to_string();
    let mut cases = Vec::new();
    for (i, template) in TEMPLATES.iter().enumerate() {
        let password = NASTY[i % NASTY.len()];
        let written = if i % 2 == 0 {
            encode(password)
        } else {
            password.to_string()
        };
        let url = template.replace("{p}", &written).replace("{port}", &port);
        for loud in LOUD {
            cases.push((url.clone(), password, loud));
        }
    }
    std::thread::scope(|s| {
        for chunk in cases.chunks(cases.len().div_ceil(4)) {
            s.spawn(move || {
                for (url, password, loud) in chunk {
                    let args = [*loud, &["exec", "-n", "k", "--", "true"]].concat();
                    let out = run(url, &args);
                    assert!(!out.status.success(), "{url}: {out:?}");
                    shown(url, password, &out);
                }
            });
        }
    });
}

#[cfg(feature = "redis")]
#[test]
fn url_passwords_never_show_in_log_lines_status_nor_a_child_s_environment() {
    for password in [NASTY[2], NASTY[4]] {
        let server = crate::support::RedisServer::start_with(&["--requirepass", password]);
        let url = format!("redis://:{}@127.0.0.1:{}", encode(password), server.port);
        for loud in LOUD {
            let args = [loud, &["exec", "k", "--", "env"]].concat();
            let out = run(&url, &args);
            assert!(out.status.success(), "{out:?}");
            let all = shown(&url, password, &out);
            assert!(all.contains("DLOCK_URL=redis://127.0.0.1:"), "{all}");
            let held = run(&url, &[loud, &["lock", "held", "--ttl", "1m"]].concat());
            assert!(held.status.success(), "{held:?}");
            shown(&url, password, &held);
            for extra in [&[][..], &["--json"]] {
                let out = run(&url, &[loud, &["status"], extra].concat());
                shown(&url, password, &out);
                assert!(out.status.success(), "{out:?}");
            }
            let out = run(&url, &[loud, &["unlock", "held", "--force"]].concat());
            shown(&url, password, &out);
        }
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_comma_in_a_url_password_works_escaped_and_never_shows_raw() {
    let port = closed_port();
    // Escaped, the password reaches the server: here, a closed port.
    let out = status(&format!("redis://u:Ab%2CCd@127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    // Raw, `--url`'s comma split is undone: the same.
    let out = status(&format!("redis://u:Ab,Cd@127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("Ab") && !err.contains("Cd"), "{err}");
}

#[cfg(feature = "redis")]
#[test]
fn redis_urls_refuse_unknown_parameters() {
    for url in [
        "redis://127.0.0.1:1?min_replica=1",
        "rediss://127.0.0.1:1?bogus=1",
        "redis+unix:///r.sock?bogus=1",
        "redis+sentinel://127.0.0.1:1/m?min_replica=1",
        "redis+cluster://127.0.0.1:1?bogus=1",
    ] {
        let out = status(url);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("unknown parameter '") && err.contains("known: "),
            "{url}: {err}"
        );
    }
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_password_of_any_characters_logs_in_and_a_missing_one_is_named() {
    let server = crate::support::PostgresServer::start();
    let nasty = "Pa/SS?#@:%, é";
    let role = "nasty";
    let quoted = nasty.replace('\'', "''");
    server.psql(&format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{quoted}'; GRANT ALL ON DATABASE postgres TO {role}; GRANT ALL ON SCHEMA public TO {role}"
    ));
    let at = format!("@127.0.0.1:{}/postgres", server.port);
    for written in [nasty.replace('%', "%25"), encode(nasty)] {
        let url = format!("postgres://{role}:{written}{at}");
        let out = status(&url);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = status(&format!("postgres://{role}{at}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("wants a password") && err.contains("PGPASSWORD"),
        "{err}"
    );
    // A socket directory in ?host= is used, not passed over for TCP: nothing listens there.
    let out = status("postgres:///postgres?host=/nonexistent");
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let both = format!(
        "postgres://127.0.0.1:{}/postgres?host=/nonexistent",
        server.port
    );
    assert_eq!(status(&both).status.code(), Some(2));
}
