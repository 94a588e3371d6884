//! Secure and managed connections through the CLI against real servers: ACL users, TLS
//! with a private CA and client certificates, Sentinel discovery.

use std::path::PathBuf;

use crate::support::{self, free_port, pki, text, RedisServer};

/// One line on stderr, exit 69, naming the server, leaking no secret.
fn assert_unavailable(out: &std::process::Output, names: &str, secrets: &[&str]) {
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(names), "names {names}: {err}");
    for s in secrets {
        assert!(!err.contains(s), "leaks {s}: {err}");
    }
}

/// `dlock ARGS` against `url`, with `REDISCLI_AUTH` set when a password is given.
fn run_at(url: &str, auth: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut c = support::dlock();
    c.env("DLOCK_URL", url).args(args);
    if let Some(password) = auth {
        c.env("REDISCLI_AUTH", password);
    }
    c.output().unwrap()
}

/// The first `exec` of key `k` on a fresh server runs, with fencing token 1.
fn assert_first_exec_runs(url: &str) {
    let token = support::token_of(support::dlock().env("DLOCK_URL", url).args(["exec", "k"]));
    assert_eq!(token, 1);
}

#[test]
fn an_acl_user_with_rights_on_dlock_keys_only_works() {
    // Least privilege: dlock's keys and channels, no dangerous commands.
    let server = RedisServer::start_with(&[
        "--user",
        "alice",
        "on",
        ">wonderland",
        "~dlock:*",
        "&dlock:*",
        "+@all",
        "-@dangerous",
    ]);
    let url = format!("redis://alice:wonderland@127.0.0.1:{}", server.port);
    let run = |url: &str, args: &[&str]| run_at(url, None, args);
    assert_first_exec_runs(&url);
    let out = run(&url, &["lock", "k", "--ttl", "1m"]);
    assert!(out.status.success(), "{out:?}");
    let out = run(&url, &["status", "--json"]);
    assert!(out.status.success(), "status lists with SCAN: {out:?}");
    assert!(text(&out.stdout).contains("\"key\":\"k\""));

    // The user in the URL, the password from REDISCLI_AUTH.
    let bare = format!("redis://alice@127.0.0.1:{}", server.port);
    let out = run_at(
        &bare,
        Some("wonderland"),
        &["exec", "-n", "other", "--", "true"],
    );
    assert!(out.status.success(), "{out:?}");

    // A wrong password: 69, one line, no password.
    let wrong = format!("redis://alice:looking-glass@127.0.0.1:{}", server.port);
    let out = run(&wrong, &["exec", "k2", "--", "true"]);
    assert_unavailable(
        &out,
        &server.port.to_string(),
        &["looking-glass", "wonderland"],
    );
}

#[test]
fn an_acl_user_without_rights_on_the_keys_gets_one_clear_line() {
    let server = RedisServer::start_with(&["--user", "bob", "on", ">builder", "~other:*", "+@all"]);
    let url = format!("redis://bob:builder@127.0.0.1:{}", server.port);
    let out = support::dlock()
        .env("DLOCK_URL", &url)
        .args(["exec", "k", "--", "true"])
        .output()
        .unwrap();
    assert_unavailable(&out, &server.port.to_string(), &["builder"]);
    let err = text(&out.stderr).to_lowercase();
    assert!(err.contains("noperm") && err.contains("'k'"), "{err}");
}

#[test]
fn tls_with_a_private_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let Some(pki) = pki(dir.path()) else {
        panic!("openssl is needed to make the test certificates (apt-get install openssl)");
    };
    let tls_port = free_port().to_string();
    let p = |p: &PathBuf| p.to_string_lossy().into_owned();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &p(&pki.server_cert),
        "--tls-key-file",
        &p(&pki.server_key),
        "--tls-ca-cert-file",
        &p(&pki.ca),
        "--tls-auth-clients",
        "yes",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let dlock = |env: &[(&str, &PathBuf)]| support::exec_tls(&url, env);
    let all = [
        ("DLOCK_TLS_CA", &pki.ca),
        ("DLOCK_TLS_CERT", &pki.client_cert),
        ("DLOCK_TLS_KEY", &pki.client_key),
    ];
    let out = dlock(&all);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "1");
    assert_eq!(
        server.cli(&["GET", "dlock:{secure}:fence"]),
        "1",
        "went to that server"
    );

    // The server requires a client certificate.
    let out = dlock(&all[..1]);
    assert_unavailable(&out, &tls_port, &[]);
    // Without the private CA the server's certificate is not trusted.
    let out = dlock(&all[1..]);
    assert_unavailable(&out, &tls_port, &[]);
    // A certificate without its key is a usage error, before any connection.
    let out = dlock(&all[..2]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("DLOCK_TLS_KEY"), "{out:?}");
}

#[test]
fn sentinel_finds_the_master() {
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel(master.port, "mymaster");
    // A dead Sentinel first in the list: the next one answers.
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{}/mymaster",
        free_port(),
        sentinel.port
    );
    let out = support::dlock()
        .env("DLOCK_URL", &url)
        .args(["lock", "found", "--ttl", "1m"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let owner = text(&out.stdout);
    assert_eq!(
        master.cli(&["HGET", "dlock:{found}:lease", "owner"]),
        owner,
        "the lease is on the master"
    );
    // Through -u (split on commas by the CLI, put back together).
    let out = support::dlock()
        .args(["-u", &url, "unlock", "found", "--owner", &owner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(master.cli(&["EXISTS", "dlock:{found}:lease"]), "0");

    // A master name the Sentinels do not know: 69, one line. (Sentinels that name no
    // master may be failing over: ridden out for the time allowed, the least with `-n`.)
    let unknown = format!("redis+sentinel://127.0.0.1:{}/nosuch", sentinel.port);
    let out = support::dlock()
        .env("DLOCK_URL", &unknown)
        .args(["exec", "k", "-n", "--", "true"])
        .output()
        .unwrap();
    assert_unavailable(&out, &sentinel.port.to_string(), &[]);
}

#[test]
fn a_unix_socket_url_works_and_keeps_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("redis.sock");
    let sock_arg = sock.display().to_string();
    let server = RedisServer::start_with(&["--unixsocket", &sock_arg, "--requirepass", "s3cret"]);
    let run = |url: &str, args: &[&str]| run_at(url, None, args);
    let url = format!("redis+unix://{}?pass=s3cret", sock.display());
    assert_first_exec_runs(&url);

    // Held through the socket, seen through TCP: the same server. The socket URL is shown
    // with its password hidden.
    let out = run(&url, &["lock", "k", "--ttl", "1m"]);
    assert!(out.status.success(), "{out:?}");
    let tcp = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let out = run(&tcp, &["status", "k"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = run(&url, &["status", "k", "--json"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("pass=***"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");

    // The password from REDISCLI_AUTH, as for redis://.
    let bare = format!("redis+unix://{}", sock.display());
    let out = run_at(
        &bare,
        Some("s3cret"),
        &["exec", "-n", "other", "--", "true"],
    );
    assert!(out.status.success(), "{out:?}");

    // A wrong password: 69, one line naming the socket, no password.
    let wrong = format!("redis+unix://{}?pass=nope-nope", sock.display());
    let out = run(&wrong, &["exec", "k2", "--", "true"]);
    assert_unavailable(&out, "redis.sock", &["nope-nope", "s3cret"]);
}

#[test]
fn no_password_for_a_server_that_wants_one_says_authentication_is_required() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = server.url();
    let port = server.port.to_string();
    // Each speaks to the server differently (a script call, a pipeline, a SCAN), and
    // Redis refuses each in its own words.
    for args in [
        &["exec", "k", "--", "true"][..],
        &["lock", "k"],
        &["status", "k"],
        &["status"],
        &["renew", "k", "--owner", "o"],
    ] {
        let out = run_at(&url, None, args);
        assert_unavailable(&out, &port, &["s3cret"]);
        let err = text(&out.stderr);
        assert!(err.contains("authentication required"), "{args:?}: {err}");
        if args[0] != "status" {
            assert!(err.contains("'k'"), "{args:?} names the key: {err}");
        }
    }
    // Nothing was left behind by the refused calls.
    assert_eq!(
        server.cli(&["-a", "s3cret", "--no-auth-warning", "DBSIZE"]),
        "0"
    );
}

/// `exec CMD` where CMD prints its environment, then runs nested `dlock exec`s: of the same
/// key (re-entry: the same token) and of another key. Returns CMD's output.
fn env_and_nested_calls(url: &str) -> String {
    let dlock = support::dlock_bin().display().to_string();
    let script = format!(
        "env; '{dlock}' exec k -- sh -c 'echo nested-token=$DLOCK_FENCING_TOKEN' \
         && '{dlock}' exec other -- echo other-ran"
    );
    let out = run_at(url, None, &["exec", "k", "--", "sh", "-c", &script]);
    assert!(out.status.success(), "{out:?}");
    text(&out.stdout)
}

#[test]
fn the_command_gets_no_password_and_nested_calls_still_reach_the_store() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let out = env_and_nested_calls(&url);
    assert!(
        !out.contains("s3cret"),
        "the environment shows the password: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l == format!("DLOCK_URL={}", server.url())),
        "{out}"
    );
    assert!(out.contains("nested-token=1"), "re-entered: {out}");
    assert!(out.contains("other-ran"), "{out}");
    assert_eq!(
        server.cli(&[
            "-a",
            "s3cret",
            "--no-auth-warning",
            "GET",
            "dlock:{other}:fence"
        ]),
        "1"
    );

    // The password goes only where it was given: pointed elsewhere, a nested call gets none.
    let other = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let dlock = support::dlock_bin().display().to_string();
    let script = format!("DLOCK_URL={} '{dlock}' exec k -- true", other.url());
    let out = run_at(&url, None, &["exec", "k", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        text(&out.stderr).contains("authentication required"),
        "{out:?}"
    );
}

#[test]
fn each_redlock_server_keeps_its_own_password_through_nested_calls() {
    let servers: Vec<RedisServer> = ["pw-a", "pw-b", "pw-c"]
        .iter()
        .map(|pw| RedisServer::start_with(&["--requirepass", pw]))
        .collect();
    let urls: Vec<String> = servers
        .iter()
        .zip(["pw-a", "pw-b", "pw-c"])
        .map(|(s, pw)| format!("redis://:{pw}@127.0.0.1:{}", s.port))
        .collect();
    let out = env_and_nested_calls(&urls.join(","));
    assert!(
        !out.contains("pw-"),
        "the environment shows a password: {out}"
    );
    assert!(out.contains("nested-token=1"), "re-entered: {out}");
    assert!(out.contains("other-ran"), "{out}");
}
