//! dlock and `etcdctl lock` contend for the same locks: neither runs its command while the
//! other holds the lock, in either order, and fencing tokens increase across both.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{dlock, read_when_ready, wait_exit, wait_for, EtcdServer};

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
    let mut c = dlock();
    c.env("DLOCK_URL", server.url())
        .args(["exec", "job", "--", "sh", "-c"])
        .arg(critical_section(dir, "dlock", "$DLOCK_FENCING_TOKEN"));
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
