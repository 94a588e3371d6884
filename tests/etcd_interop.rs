//! dlock and `etcdctl lock` contend for the same locks: neither runs its command while the
//! other holds the lock, in either order, and fencing tokens increase across both; how a
//! dlock holder hands the lock to a dlock waiter; and how dlock reaches a member: users and
//! passwords, TLS with client certificates.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{self, dlock, read_when_ready, wait_exit, wait_for, EtcdServer};

/// A shell script that records its start, waits for `go`, records its end.
fn critical_section(dir: &Path, who: &str, token: &str) -> String {
    let d = dir.display();
    format!(
        "echo \"$(date +%s%N) {token}\" > '{d}/{who}-start'; \
         while [ ! -e '{d}/go-{who}' ]; do sleep 0.01; done; \
         date +%s%N > '{d}/{who}-end'"
    )
}

fn spawn(mut c: Command) -> Child {
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn dlock_exec(server: &EtcdServer, dir: &Path) -> Child {
    exec_job(
        server,
        critical_section(dir, "dlock", "$DLOCK_FENCING_TOKEN"),
    )
}

/// `dlock exec job -- sh -c SCRIPT` on `server`.
fn exec_job(server: &EtcdServer, script: String) -> Child {
    let mut c = dlock();
    c.env("DLOCK_URL", server.url())
        .args(["exec", "job", "--", "sh", "-c"])
        .arg(script);
    spawn(c)
}

fn etcdctl_lock(server: &EtcdServer, dir: &Path) -> Child {
    let mut c = server.etcdctl();
    c.args(["lock", "job", "--", "sh", "-c"])
        .arg(critical_section(dir, "etcdctl", "$ETCD_LOCK_REV"));
    spawn(c)
}

/// How many contenders have a key for lock `job`.
fn contenders(server: &EtcdServer) -> usize {
    server
        .ctl(&["get", "job/", "--prefix", "--keys-only"])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

/// `(start ns, token)` and end ns of one side's critical section.
fn section(dir: &Path, who: &str) -> (u128, u64, u128) {
    let start = read_when_ready(&dir.join(format!("{who}-start")), Duration::from_secs(20));
    let (at, token) = start.split_once(' ').unwrap();
    let end = read_when_ready(&dir.join(format!("{who}-end")), Duration::from_secs(20));
    (
        at.parse().unwrap(),
        token.parse().unwrap(),
        end.parse().unwrap(),
    )
}

/// `first` takes the lock, `second` queues behind it and must not start until `first`'s
/// command has ended.
fn one_waits_for_the_other(first: &str, second: &str) {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let start = |who: &str| match who {
        "dlock" => dlock_exec(&server, dir.path()),
        _ => etcdctl_lock(&server, dir.path()),
    };
    let mut a = start(first);
    let started = dir.path().join(format!("{first}-start"));
    read_when_ready(&started, Duration::from_secs(20));
    let mut b = start(second);
    assert!(
        wait_for(Duration::from_secs(20), || contenders(&server) == 2),
        "{second} never queued"
    );
    // Queued, it must not run while the first holds the lock.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !dir.path().join(format!("{second}-start")).exists(),
        "{second} ran while {first} held the lock"
    );
    std::fs::write(dir.path().join(format!("go-{first}")), "").unwrap();
    let (_, token_a, end_a) = section(dir.path(), first);
    std::fs::write(dir.path().join(format!("go-{second}")), "").unwrap();
    let (start_b, token_b, _) = section(dir.path(), second);
    assert!(start_b > end_a, "{second} started before {first} ended");
    assert!(token_b > token_a, "tokens {token_a} then {token_b}");
    for (who, child) in [(first, &mut a), (second, &mut b)] {
        let status = wait_exit(child, Duration::from_secs(20)).expect("exits");
        assert!(status.success(), "{who}: {status:?}");
    }
    assert!(wait_for(Duration::from_secs(5), || contenders(&server) == 0));
}

#[test]
fn etcdctl_waits_for_dlock() {
    one_waits_for_the_other("dlock", "etcdctl");
}

#[test]
fn dlock_waits_for_etcdctl() {
    one_waits_for_the_other("etcdctl", "dlock");
}

/// The cluster's revision: that of its last write.
fn revision(server: &EtcdServer) -> i64 {
    let out = server.ctl(&["get", "job/", "--prefix", "--keys-only", "-w", "json"]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    json["header"]["revision"].as_i64().unwrap()
}

/// A dlock waiter that queued after the holder took the lock is handed it by the holder's
/// release: the one write that frees the lock makes the waiter its holder, so the waiter's
/// token is that write's revision and it writes nothing of its own before it runs.
#[test]
fn the_release_hands_the_lock_to_a_waiter_that_came_later() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = dlock_exec(&server, dir.path());
    read_when_ready(&dir.path().join("dlock-start"), Duration::from_secs(20));
    let tokens = dir.path().join("waiter-token");
    let script = format!("echo $DLOCK_FENCING_TOKEN > '{}'", tokens.display());
    let mut b = exec_job(&server, script);
    assert!(
        wait_for(Duration::from_secs(20), || contenders(&server) == 2),
        "the waiter never queued"
    );
    let before = revision(&server);
    std::fs::write(dir.path().join("go-dlock"), "").unwrap();
    for (who, child) in [("holder", &mut a), ("waiter", &mut b)] {
        let status = wait_exit(child, Duration::from_secs(20)).expect("exits");
        assert!(status.success(), "{who}: {status:?}");
    }
    let token: i64 = std::fs::read_to_string(&tokens)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        token,
        before + 1,
        "the waiter's token is not the revision of the release (handed over)"
    );
}

/// Readers (`exec --shared`) hold together; `etcdctl lock` queued behind them starts only
/// once both have ended, with a newer token, and a reader arriving after it waits for it.
#[test]
fn etcdctl_waits_for_every_reader() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let reader = |who: &str| {
        let mut c = dlock();
        c.env("DLOCK_URL", server.url())
            .args(["exec", "--shared", "job", "--", "sh", "-c"])
            .arg(critical_section(dir.path(), who, "$DLOCK_FENCING_TOKEN"));
        spawn(c)
    };
    let (mut r1, mut r2) = (reader("r1"), reader("r2"));
    for who in ["r1", "r2"] {
        read_when_ready(
            &dir.path().join(format!("{who}-start")),
            Duration::from_secs(20),
        );
    }
    let mut ctl = etcdctl_lock(&server, dir.path());
    assert!(
        wait_for(Duration::from_secs(20), || contenders(&server) == 3),
        "etcdctl never queued"
    );
    let late = dlock()
        .env("DLOCK_URL", server.url())
        .args(["exec", "-n", "--shared", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        late.status.code(),
        Some(75),
        "a reader overtook etcdctl: {late:?}"
    );
    std::fs::write(dir.path().join("go-r1"), "").unwrap();
    let (_, t1, end1) = section(dir.path(), "r1");
    std::fs::write(dir.path().join("go-r2"), "").unwrap();
    let (_, t2, end2) = section(dir.path(), "r2");
    assert_ne!(t1, t2, "two readers with one token");
    std::fs::write(dir.path().join("go-etcdctl"), "").unwrap();
    let (start, token, _) = section(dir.path(), "etcdctl");
    assert!(start > end1.max(end2), "etcdctl started beside a reader");
    assert!(token > t1.max(t2), "tokens {t1}, {t2} then {token}");
    for child in [&mut r1, &mut r2, &mut ctl] {
        let status = wait_exit(child, Duration::from_secs(20)).expect("exits");
        assert!(status.success(), "{status:?}");
    }
}

#[test]
fn status_shows_an_etcdctl_holder() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut held = etcdctl_lock(&server, dir.path());
    read_when_ready(&dir.path().join("etcdctl-start"), Duration::from_secs(20));
    // An unrelated key is not a lock.
    server.ctl(&["put", "config/x", "1"]);
    let out = dlock()
        .env("DLOCK_URL", server.url())
        .args(["status", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\"job\""), "{text}");
    assert!(text.contains("(etcdctl lock)"), "{text}");
    assert!(!text.contains("config"), "{text}");
    std::fs::write(dir.path().join("go-etcdctl"), "").unwrap();
    assert!(wait_exit(&mut held, Duration::from_secs(20)).is_some());
}

/// The lease id (hex) of lock `job`'s only contender.
fn holder_lease(server: &EtcdServer) -> String {
    let keys = server.ctl(&["get", "job/", "--prefix", "--keys-only"]);
    let key = keys.lines().find(|l| !l.is_empty()).expect("a holder");
    key.rsplit('/').next().unwrap().to_string()
}

#[test]
fn a_revoked_lease_kills_the_command() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut c = dlock();
    c.env("DLOCK_URL", server.url())
        .args(["exec", "job", "--ttl", "3s", "--", "sh", "-c"])
        .arg(critical_section(
            dir.path(),
            "dlock",
            "$DLOCK_FENCING_TOKEN",
        ));
    let mut held = spawn(c);
    read_when_ready(&dir.path().join("dlock-start"), Duration::from_secs(20));
    server.ctl(&["lease", "revoke", &holder_lease(&server)]);
    // The next keep-alive (every third of the TTL) learns the lease is gone.
    let status = wait_exit(&mut held, Duration::from_secs(3)).expect("dlock still runs");
    assert_eq!(status.code(), Some(i32::from(dlock::exit::LEASE_LOST)));
    assert!(
        !dir.path().join("dlock-end").exists(),
        "the command went on"
    );
}

#[test]
fn lock_then_unlock_from_another_process() {
    let server = EtcdServer::start();
    let run = |args: &[&str]| {
        dlock()
            .env("DLOCK_URL", server.url())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["lock", "job", "--ttl", "30s"]);
    assert!(out.status.success(), "{out:?}");
    let owner = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!owner.is_empty());
    assert_eq!(contenders(&server), 1);
    let busy = run(&["lock", "job", "--no-wait"]);
    assert_eq!(
        busy.status.code(),
        Some(i32::from(dlock::exit::NOT_OBTAINED))
    );
    assert_eq!(contenders(&server), 1, "a refused --no-wait leaves no key");
    let text = String::from_utf8_lossy(&run(&["status", "job"]).stdout).to_string();
    assert!(text.contains(&owner), "{text}");
    let unlocked = run(&["unlock", "job", "--owner", &owner]);
    assert!(unlocked.status.success(), "{unlocked:?}");
    assert_eq!(contenders(&server), 0);
}

#[test]
fn user_and_password_in_the_url() {
    let server = EtcdServer::start();
    server.ctl(&["user", "add", "root:rootpw"]);
    server.ctl(&["auth", "enable"]);
    let url = |pw: &str| format!("etcd://root:{pw}@{}", server.endpoint());
    // Renewals (keep-alives) and the release run with the token too.
    let ok = dlock()
        .env("DLOCK_URL", url("rootpw"))
        .args(["exec", "job", "--ttl", "1s", "--", "sleep", "1.5"])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{ok:?}");
    let wrong = dlock()
        .env("DLOCK_URL", url("wrongpw"))
        .args(["exec", "job", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(
        wrong.status.code(),
        Some(i32::from(dlock::exit::UNAVAILABLE)),
        "{err}"
    );
    assert!(err.contains("authentication failed"), "{err}");
    assert!(!err.contains("wrongpw"), "{err}");
    let anonymous = dlock()
        .env("DLOCK_URL", server.url())
        .args(["exec", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        anonymous.status.code(),
        Some(i32::from(dlock::exit::UNAVAILABLE))
    );
    let keys = server.ctl(&[
        "--user",
        "root:rootpw",
        "get",
        "job/",
        "--prefix",
        "--keys-only",
    ]);
    assert_eq!(keys, "", "nothing left held");
}

#[test]
fn a_killed_waiter_leaves_the_line_within_its_ttl() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut holder = dlock_exec(&server, dir.path());
    read_when_ready(&dir.path().join("dlock-start"), Duration::from_secs(20));
    let mut waiter = dlock();
    waiter
        .env("DLOCK_URL", server.url())
        .args(["exec", "job", "--ttl", "2s", "--", "true"]);
    let mut waiter = spawn(waiter);
    assert!(wait_for(Duration::from_secs(20), || contenders(&server) == 2));
    let killed = std::time::Instant::now();
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    assert!(wait_for(Duration::from_secs(10), || contenders(&server) == 1));
    let left = killed.elapsed();
    // Its lease ends at most one TTL (2 s) after its last keep-alive, plus the server's check.
    assert!(left < Duration::from_millis(3500), "left after {left:?}");
    std::fs::write(dir.path().join("go-dlock"), "").unwrap();
    assert!(wait_exit(&mut holder, Duration::from_secs(20)).is_some());
}

/// `exec --hold-at-least` on etcd: dlock exits at once, the server keeps the finished run's
/// key on a lease of its own until the hold ends (nobody keeps it alive), `etcdctl lock`
/// queues behind it meanwhile and runs only after it, and `dlock wait` returns once the
/// lock is free again.
#[test]
fn a_held_run_outlives_dlock_and_holds_off_etcdctl() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let wall_ns = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.unwrap().as_nanos()
    };
    let (t0, t0_ns) = (std::time::Instant::now(), wall_ns());
    let out = dlock()
        .env("DLOCK_URL", server.url())
        .args(["exec", "job", "--hold-at-least", "4s", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "dlock waited out the hold"
    );
    let status = dlock()
        .env("DLOCK_URL", server.url())
        .args(["status"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(table.contains("by --hold-at-least"), "not listed: {table}");
    let mut theirs = etcdctl_lock(&server, dir.path());
    std::fs::write(dir.path().join("go-etcdctl"), "").unwrap();
    let wait = dlock()
        .env("DLOCK_URL", server.url())
        .args(["wait", "job"])
        .output()
        .unwrap();
    assert_eq!(wait.status.code(), Some(0), "{wait:?}");
    let (start_ns, _, _) = section(dir.path(), "etcdctl");
    let started = Duration::from_nanos((start_ns - t0_ns) as u64);
    assert!(
        started >= Duration::from_millis(3900),
        "etcdctl ran during the hold: {started:?}"
    );
    assert!(wait_exit(&mut theirs, Duration::from_secs(20)).is_some_and(|s| s.success()));
}

#[test]
fn a_percent_encoded_password_in_the_url() {
    let server = EtcdServer::start();
    server.ctl(&["user", "add", "root:p@ss:w%rd"]);
    server.ctl(&["auth", "enable"]);
    let url = format!("etcd://root:p%40ss%3Aw%25rd@{}", server.endpoint());
    let out = dlock()
        .env("DLOCK_URL", &url)
        .args(["exec", "job", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bad = dlock()
        .env("DLOCK_URL", url.replace("%40", "%4"))
        .args(["exec", "job", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(err.contains("bad escape in the password"), "{err}");
    assert!(!err.contains("ss%3A") && !err.contains("w%25rd"), "{err}");
}

/// `etcds://` to a member that wants TLS and a client certificate of its CA: works with
/// `DLOCK_TLS_CA/CERT/KEY`, fails in one line without the client certificate.
#[test]
fn etcds_with_a_private_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let Some(pki) = crate::support::pki(dir.path()) else {
        panic!("openssl is needed to make the test certificates (apt-get install openssl)");
    };
    let server = EtcdServer::start_tls(&pki);
    let url = format!("etcds://{}", server.endpoint());
    let with = |vars: &[(&str, &Path)]| {
        let mut c = dlock();
        c.env("DLOCK_URL", &url);
        for (k, v) in vars {
            c.env(k, v);
        }
        c
    };
    let all = [
        ("DLOCK_TLS_CA", pki.ca.as_path()),
        ("DLOCK_TLS_CERT", &pki.client_cert),
        ("DLOCK_TLS_KEY", &pki.client_key),
    ];
    support::token_of(with(&all).args(["exec", "job"]));
    let held = with(&all)
        .args(["lock", "held", "--ttl", "1m"])
        .output()
        .unwrap();
    assert!(held.status.success(), "{held:?}");
    let status = with(&all).args(["status"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("held"),
        "{status:?}"
    );
    // No client certificate: the member refuses the handshake.
    let refused = with(&all[..1])
        .args(["exec", "job", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(
        refused.status.code(),
        Some(i32::from(dlock::exit::UNAVAILABLE)),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&url), "{err}");
}

/// The keys of a lock named below another (`p/a`: `p/a/<hex>`) are under `p/` too, but only
/// `p/<hex>` keys contend for `p`: with `p/a` held and waited for, `exec -n p` runs, `status
/// p` says free and `wait p` returns at once; and a waiter on `p`, queued behind a holder of
/// `p` whose key is younger than `p/a`'s, takes its turn once that holder goes, while `p/a`'s
/// holder still runs.
#[test]
fn a_lock_named_below_another_does_not_block_it() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let run = |args: &[&str]| {
        let out = dlock().env("DLOCK_URL", server.url()).args(args).output();
        out.unwrap()
    };
    let spawn_exec = |key: &str, script: String| {
        let mut c = dlock();
        c.env("DLOCK_URL", server.url())
            .args(["exec", key, "--timeout", "30s", "--", "sh", "-c"])
            .arg(script);
        spawn(c)
    };
    let under = |prefix: &str| server.ctl(&["get", prefix, "--prefix", "--keys-only"]);
    let count = |prefix: &str| under(prefix).lines().filter(|l| !l.is_empty()).count();
    let (r, g) = (ready.display(), go.display());
    let script = format!("echo up > '{r}'; while [ ! -e '{g}' ]; do sleep 0.01; done");
    let mut sub_holder = spawn_exec("p/a", script);
    read_when_ready(&ready, Duration::from_secs(20));
    let held = run(&["lock", "p", "--ttl", "1m", "--timeout", "10s"]);
    assert!(held.status.success(), "{held:?}");
    let owner = String::from_utf8_lossy(&held.stdout).trim().to_string();
    let mut sub_waiter = spawn_exec("p/a", "true".into());
    assert!(wait_for(Duration::from_secs(20), || count("p/a/") == 2));
    // The waiter's key is younger than p's holder's, and a p/a key came in between.
    let mut waiter = spawn_exec("p", "true".into());
    assert!(wait_for(Duration::from_secs(20), || count("p/") == 4));
    let unlocked = run(&["unlock", "p", "--owner", &owner]);
    assert!(unlocked.status.success(), "{unlocked:?}");
    let status = wait_exit(&mut waiter, Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        under("p/")
    );
    assert!(
        sub_holder.try_wait().unwrap().is_none(),
        "p/a's holder still runs"
    );

    let free = run(&["exec", "-n", "p", "--", "true"]);
    assert!(free.status.success(), "{free:?}");
    let status = run(&["status", "p"]);
    assert_eq!(status.status.code(), Some(1), "p is free: {status:?}");
    let status = run(&["status", "p/a"]);
    assert_eq!(status.status.code(), Some(0), "p/a is held: {status:?}");
    let wait = run(&["wait", "p", "--timeout", "5s"]);
    assert!(wait.status.success(), "{wait:?}");
    std::fs::write(&go, "").unwrap();
    for p_a in [&mut sub_holder, &mut sub_waiter] {
        let status = wait_exit(p_a, Duration::from_secs(20));
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
    }
}
