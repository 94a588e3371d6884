//! The ZooKeeper store against real servers: detached leases as TTL nodes, the session
//! timeout the server grants, passwords, and faults (a server killed during a hold, an
//! ensemble losing its leader, two of three servers frozen, a waiter killed in line, a
//! session expired while its holder was stopped), one connection per process, and TLS
//! (`zks://`).

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    self, dlock, exec_tls, pki, read_when_ready, wait_exit, Pki, ZkEnsemble, ZkServer,
};

fn run(url: &str, args: &[&str]) -> Output {
    dlock().env("DLOCK_URL", url).args(args).output().unwrap()
}

/// `dlock exec KEY ARGS… -- sh -c` that writes its token to `dir/start` and then sleeps.
fn holder(url: &str, key: &str, dir: &std::path::Path, extra: &[&str]) -> Child {
    let start = dir.join("start");
    let end = dir.join("end");
    dlock()
        .env("DLOCK_URL", url)
        .args(["exec", key])
        .args(extra)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo $DLOCK_FENCING_TOKEN > '{}'; sleep 30; touch '{}'",
            start.display(),
            end.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn token_of(dir: &std::path::Path) -> u64 {
    let text = read_when_ready(&dir.join("start"), Duration::from_secs(30));
    text.trim().parse().expect("token")
}

#[test]
fn lock_then_unlock_from_another_process() {
    let server = ZkServer::start();
    let url = server.url();
    let out = run(&url, &["lock", "job", "--ttl", "30s"]);
    assert!(out.status.success(), "{out:?}");
    let owner = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!owner.is_empty());
    // The process that took it is gone; the TTL node holds on.
    let busy = run(&url, &["lock", "job", "--no-wait"]);
    assert_eq!(busy.status.code(), Some(75), "{busy:?}");
    let text = String::from_utf8_lossy(&run(&url, &["status", "job"]).stdout).to_string();
    assert!(text.contains(&owner), "{text}");
    let renewed = run(&url, &["renew", "job", "--owner", &owner, "--ttl", "20s"]);
    assert!(renewed.status.success(), "{renewed:?}");
    let unlocked = run(&url, &["unlock", "job", "--owner", &owner]);
    assert!(unlocked.status.success(), "{unlocked:?}");
    let free = run(&url, &["lock", "job", "--no-wait", "--ttl", "5s"]);
    assert!(free.status.success(), "{free:?}");
}

/// Detached shared leases (TTL nodes named as Curator's readers): each renews and unlocks
/// its own, a writer waits for them, and `unlock --force` frees them all.
#[test]
fn detached_readers_share_and_force_frees_them_all() {
    let server = ZkServer::start();
    let url = server.url();
    let take = |flags: &[&str]| {
        let out = run(
            &url,
            &[&["lock", "job", "-n", "--ttl", "30s"], flags].concat(),
        );
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let (a, b) = (take(&["--shared"]), take(&["--shared"]));
    let writer = run(&url, &["lock", "job", "--no-wait"]);
    assert_eq!(writer.status.code(), Some(75), "{writer:?}");
    let out = run(&url, &["--json", "status", "job"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["sharing"], "shared", "{st}");
    let owners: Vec<&str> = st["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, [a.as_str(), b.as_str()], "{st}");
    let renewed = run(&url, &["renew", "job", "--owner", &b, "--ttl", "20s"]);
    assert!(renewed.status.success(), "{renewed:?}");
    let unlocked = run(&url, &["unlock", "job", "--owner", &b]);
    assert!(unlocked.status.success(), "{unlocked:?}");
    let c = take(&["--shared"]);
    assert_ne!(c, a);
    let forced = run(&url, &["unlock", "job", "--force"]);
    assert!(forced.status.success(), "{forced:?}");
    let free = run(&url, &["lock", "job", "--no-wait", "--ttl", "5s"]);
    assert!(free.status.success(), "{free:?}");
}

#[test]
fn a_detached_lease_ends_at_its_ttl() {
    let server = ZkServer::start();
    let url = server.url();
    let out = run(&url, &["lock", "job", "--ttl", "1s"]);
    assert!(out.status.success(), "{out:?}");
    let started = Instant::now();
    // dlock honours the expiry itself, long before the server's TTL reaper runs.
    let next = run(&url, &["lock", "job", "--ttl", "5s", "--timeout", "10s"]);
    assert!(next.status.success(), "{next:?}");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(4), "waited {waited:?}");
}

#[test]
fn a_clamped_session_timeout_is_reported() {
    let server = ZkServer::start();
    // The test server grants at most 120 s.
    let out = run(
        &server.url(),
        &["exec", "-v", "job", "--ttl", "300s", "--", "true"],
    );
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("clamped the session timeout"), "{err}");
    assert!(err.contains("from 300s to 120s"), "{err}");
}

#[test]
fn the_password_is_never_printed() {
    let server = ZkServer::start();
    let url = format!("zk://alice:s3cret@{}/app", server.endpoint());
    let out = run(
        &url,
        &["exec", "job", "--", "sh", "-c", "env; echo $DLOCK_KEY"],
    );
    assert!(out.status.success(), "{out:?}");
    let bad = run(&url, &["exec", "a//b", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr).to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("a//b") && err.contains("zk://"), "{err}");
    let status = run(&url, &["status", "--json"]);
    for o in [&out, &bad, &status] {
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!all.contains("s3cret"), "{all}");
    }
}

/// Keys and chroots with characters ZooKeeper refuses in a path (controls, the private
/// use area and U+FFF0-U+FFFF, anything beyond U+FFFF), and ZooKeeper's own tree as a key
/// or a chroot: exit 2 in one line naming the key or the URL, before connecting (nothing
/// listens on the port), also with `--if-unavailable skip`, which skips only an
/// unavailable store.
#[test]
fn keys_and_chroots_zookeeper_refuses_are_usage_errors() {
    let url = format!("zk://127.0.0.1:{}", support::free_port());
    let mut cases: Vec<(String, String)> =
        ["job-🔒", "job-\u{e000}", "job-\u{fff5}", "job-\u{ffff}"]
            .iter()
            .chain(&["zookeeper", "/zookeeper/quota"])
            .map(|key| (url.clone(), key.to_string()))
            .collect();
    for chroot in ["/🔒", "/zookeeper", "/zookeeper/app", "/a\u{f8ff}"] {
        cases.push((format!("{url}{chroot}"), "job".to_string()));
    }
    for (url, key) in &cases {
        for extra in [&[][..], &["--if-unavailable", "skip"]] {
            let args = [&["exec", key.as_str()], extra, &["--", "true"]].concat();
            let out = run(url, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{url} {key:?} {extra:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("zk://127.0.0.1"), "{err}");
            assert!(!err.chars().any(|c| c.is_control() && c != '\n'), "{err:?}");
        }
        let status = run(url, &["status", key]);
        assert_eq!(status.status.code(), Some(2), "{url} {key:?}: {status:?}");
    }
}

/// The server dies during a hold: CMD is killed (exit 79) within the session timeout, so
/// before the session could expire and anyone else could take the lock.
#[test]
fn a_dead_server_ends_the_command_before_the_session_can_expire() {
    let mut server = ZkServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mut held = holder(&url, "job", dir.path(), &["--ttl", "2s"]);
    let first = token_of(dir.path());
    // When the server would end the session, right after it last heard from the holder.
    let limit = Duration::from_secs(5);
    let mut timeout = 0;
    let heard_ms = support::renewed_after(limit, || {
        let (answered, to) = server.session().expect("the holder's session");
        timeout = to;
        answered
    });
    let expires_ms = heard_ms + timeout;
    server.kill();
    let killed = Instant::now();
    let status = wait_exit(&mut held, Duration::from_secs(10)).expect("dlock still runs");
    let (dead_ms, gone) = (support::now_ms(), killed.elapsed());
    assert_eq!(status.code(), Some(79), "{status:?}");
    assert!(
        dead_ms < expires_ms,
        "CMD outlived the session by {}ms ({gone:?} after the kill)",
        dead_ms - expires_ms
    );
    assert!(!dir.path().join("end").exists(), "the command went on");
    server.restart();
    // The old session expires on the restarted server; then the lock is free again.
    let next = tempfile::tempdir().unwrap();
    let mut second = holder(&url, "job", next.path(), &["--ttl", "2s"]);
    assert!(token_of(next.path()) > first, "tokens must increase");
    let _ = second.kill();
    let _ = second.wait();
}

/// A holder whose session expired while it was stopped (SIGSTOP) finds out as it resumes:
/// CMD is killed (exit 79), and the run's record, written over a new session since the old
/// one is gone, says that the lease was lost.
#[test]
fn a_session_expired_while_stopped_is_recorded_as_a_lost_lease() {
    let server = ZkServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mut held = holder(&url, "job", dir.path(), &["--ttl", "2s"]);
    token_of(dir.path());
    support::send_signal(held.id(), "STOP");
    // The server ends the session at its timeout, and the lock's node with it.
    let expired = support::wait_for(Duration::from_secs(30), || {
        run(&url, &["status", "job"]).status.code() == Some(1)
    });
    support::send_signal(held.id(), "CONT");
    assert!(expired, "the session never expired");
    let status = wait_exit(&mut held, Duration::from_secs(10)).expect("dlock ends");
    let mut said = String::new();
    let _ = std::io::Read::read_to_string(held.stderr.as_mut().unwrap(), &mut said);
    assert_eq!(status.code(), Some(79), "{status:?}: {said}");
    assert!(!dir.path().join("end").exists(), "the command went on");
    let out = run(&url, &["status", "--json", "job"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        st["last_run"]["lease_lost"], true,
        "{st}; dlock said: {said}"
    );
    assert_eq!(st["last_run"]["exit_code"], 79, "{st}");
}

/// What a [`holder`] wrote on stderr once it has ended (nothing before).
fn said(held: &mut Child) -> String {
    let mut text = String::new();
    if held.try_wait().ok().flatten().is_some() {
        let _ = std::io::Read::read_to_string(held.stderr.as_mut().unwrap(), &mut text);
    }
    text
}

/// The leader of a 3-server ensemble is killed during a hold: the holder's session moves
/// to another server and keeps the lease past the time it would have expired otherwise,
/// nobody else gets the lock meanwhile (75, held), the holder ends by its command's own end
/// (143: never 79, a lost lease), and the next holder's token (a zxid of the new epoch) is
/// above the first one's.
#[test]
fn an_ensemble_losing_its_leader_keeps_one_holder() {
    let mut ensemble = ZkEnsemble::start();
    let url = ensemble.url();
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_secs(6);
    let mut held = holder(&url, "job", dir.path(), &["--ttl", "6s"]);
    let first = token_of(dir.path());
    let leader = ensemble.leader().expect("a leader");
    ensemble.servers[leader].kill();
    let elected = support::wait_for(Duration::from_secs(30), || ensemble.leader().is_some());
    assert!(elected, "the two servers left never elected a leader");
    let refused = run(&url, &["exec", "job", "--no-wait", "--", "true"]);
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    // Past a whole session timeout after the election, the holder still runs.
    let ended = wait_exit(&mut held, ttl + Duration::from_secs(2));
    assert!(
        ended.is_none(),
        "the holder ended: {ended:?}: {}",
        said(&mut held)
    );
    let status = run(&url, &["status", "job"]);
    assert_eq!(status.status.code(), Some(0), "not held: {status:?}");
    crate::support::send_signal(held.id(), "TERM");
    let ended = wait_exit(&mut held, Duration::from_secs(20)).expect("holder ends");
    assert_eq!(ended.code(), Some(143), "{ended:?}: {}", said(&mut held));
    let next = tempfile::tempdir().unwrap();
    let mut second = holder(&url, "job", next.path(), &["--ttl", "20s"]);
    let token = token_of(next.path());
    assert!(token > first, "tokens {first} then {token}");
    assert!(
        token >> 32 > first >> 32,
        "a new epoch: {first:x} then {token:x}"
    );
    let _ = second.kill();
    let _ = second.wait();
}

/// Two servers of three are frozen (SIGSTOP) during a hold, so the ensemble has no quorum:
/// CMD is killed (exit 79) before the session could expire, and once the two are back the
/// next holder starts only then, with a higher token.
#[test]
fn an_ensemble_without_a_quorum_ends_the_command_before_the_session_can_expire() {
    let ensemble = ZkEnsemble::start();
    let url = ensemble.url();
    let dir = tempfile::tempdir().unwrap();
    let mut held = holder(&url, "job", dir.path(), &["--ttl", "4s"]);
    let first = token_of(dir.path());
    // When the server the holder is connected to would end its session, right after it
    // last heard from it.
    let serving = ensemble.servers.iter().find(|s| s.session().is_some());
    let serving = serving.expect("the holder's session on a server");
    let limit = Duration::from_secs(5);
    let mut timeout = 0;
    let heard_ms = support::renewed_after(limit, || {
        let (answered, to) = serving.session().expect("the holder's session");
        timeout = to;
        answered
    });
    let expires_ms = heard_ms + timeout;
    let frozen: Vec<u32> = ensemble.servers[1..]
        .iter()
        .map(|s| s.pid().expect("running"))
        .collect();
    for pid in &frozen {
        crate::support::send_signal(*pid, "STOP");
    }
    let stopped = Instant::now();
    let status = wait_exit(&mut held, Duration::from_secs(15));
    let (dead_ms, gone) = (support::now_ms(), stopped.elapsed());
    for pid in &frozen {
        crate::support::send_signal(*pid, "CONT");
    }
    let status = status.expect("dlock still runs without a quorum");
    assert_eq!(status.code(), Some(79), "{status:?}");
    assert!(
        dead_ms < expires_ms,
        "CMD outlived the session by {}ms ({gone:?} after the freeze)",
        dead_ms - expires_ms
    );
    assert!(!dir.path().join("end").exists(), "the command went on");
    // The two rejoin; until a quorum forms again, dlock cannot connect (exit 69).
    assert!(
        crate::support::wait_for(Duration::from_secs(30), || {
            run(&url, &["status"]).status.success()
        }),
        "the ensemble never came back"
    );
    let next = ["exec", "job", "-w", "30s", "--ttl", "4s"];
    let token = support::token_of(dlock().env("DLOCK_URL", &url).args(next));
    assert!(token > first, "tokens {first} then {token}");
}

/// A waiter killed outright (SIGKILL) leaves the queue when its session ends, and the
/// waiter behind it gets the lock when the holder leaves.
#[test]
fn a_killed_waiter_leaves_the_line_when_its_session_ends() {
    let server = ZkServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mut held = holder(&url, "job", dir.path(), &["--ttl", "2s"]);
    token_of(dir.path());
    let waiters = || {
        let out = run(&url, &["--json", "status", "job"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["waiters"].as_array().map_or(0, Vec::len)
    };
    let spawn_waiter = || {
        dlock()
            .env("DLOCK_URL", &url)
            .args(["exec", "job", "--ttl", "2s", "-w", "60s", "--", "true"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut killed = spawn_waiter();
    assert!(
        crate::support::wait_for(Duration::from_secs(10), || waiters() == 1),
        "never queued"
    );
    let mut behind = spawn_waiter();
    assert!(
        crate::support::wait_for(Duration::from_secs(10), || waiters() == 2),
        "the second waiter never queued"
    );
    crate::support::send_signal(killed.id(), "KILL");
    let _ = killed.wait();
    assert!(
        crate::support::wait_for(Duration::from_secs(10), || waiters() == 1),
        "the killed waiter stayed in line"
    );
    crate::support::send_signal(held.id(), "TERM");
    wait_exit(&mut held, Duration::from_secs(20)).expect("holder ends");
    let status = wait_exit(&mut behind, Duration::from_secs(20)).expect("the next waiter hung");
    assert!(status.success(), "{status:?}");
}

/// A waiter whose session expires while the server is frozen (SIGSTOP past the session
/// timeout) queues again on a new session once the server is back, and gets the lock when
/// the holder (whose longer session lived through it) ends: exit 0, not 69.
#[test]
fn a_waiter_whose_session_expired_queues_again() {
    let server = ZkServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mut held = holder(&url, "job", dir.path(), &["--ttl", "30s"]);
    token_of(dir.path());
    let waiters = || {
        let out = run(&url, &["--json", "status", "job"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["waiters"].as_array().map_or(0, Vec::len)
    };
    let mut waiter = dlock()
        .env("DLOCK_URL", &url)
        .args([
            "exec", "job", "-q", "--ttl", "2s", "-w", "90s", "--", "true",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        support::wait_for(Duration::from_secs(10), || waiters() == 1),
        "never queued"
    );
    let pid = server.pid().expect("running");
    support::send_signal(pid, "STOP");
    // Past the client's own count (7/5 of the 2 s timeout) and the server's.
    std::thread::sleep(Duration::from_secs(5));
    support::send_signal(pid, "CONT");
    assert!(
        support::wait_for(Duration::from_secs(30), || waiters() == 1),
        "the waiter did not queue again"
    );
    assert!(waiter.try_wait().unwrap().is_none(), "the waiter gave up");
    support::send_signal(held.id(), "TERM");
    wait_exit(&mut held, Duration::from_secs(20)).expect("holder ends");
    let status = wait_exit(&mut waiter, Duration::from_secs(30)).expect("the waiter hung");
    let mut said = String::new();
    let _ = std::io::Read::read_to_string(waiter.stderr.as_mut().unwrap(), &mut said);
    assert!(status.success(), "{status:?}: {said}");
}

/// Waits until `server` has no client connection open: with `maxClientCnxns=1`, its
/// four-letter command is answered only then (a closed client may take a moment to go).
fn await_no_client(server: &ZkServer) {
    let free = crate::support::wait_for(Duration::from_secs(10), || server.mode().is_some());
    assert!(free, "a connection stayed open{}", server.log_tail());
}

/// One `dlock exec` is one connection: its lease's session carries every request, so a
/// server that takes one connection per address (`maxClientCnxns=1`) runs it, keeps its
/// run record and answers `status`.
#[test]
fn an_exec_uses_one_connection() {
    let server = ZkServer::start_with("maxClientCnxns=1\n");
    let url = server.url();
    await_no_client(&server);
    let out = run(&url, &["exec", "job", "--", "true"]);
    assert!(out.status.success(), "{out:?}{}", server.log_tail());
    await_no_client(&server);
    let out = run(&url, &["--json", "status", "job"]);
    assert_eq!(out.status.code(), Some(1), "free: {out:?}");
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["last_run"]["exit_code"], 0, "{st}");
    assert_eq!(st["held"], false, "the released exec left a node: {st}");
}

/// A holder, a waiter in line and `status` are three processes, three connections: a
/// server taking three per address serves them all, and the waiter runs once the holder
/// is done.
#[test]
fn a_holder_and_a_waiter_use_one_connection_each() {
    let server = ZkServer::start_with("maxClientCnxns=3\n");
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mut held = holder(&url, "job", dir.path(), &[]);
    token_of(dir.path());
    let ran = dir.path().join("waiter-ran");
    let mut waiter = dlock()
        .env("DLOCK_URL", &url)
        .args(["exec", "job", "-w", "60s", "--", "touch"])
        .arg(&ran)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let queued = crate::support::wait_for(Duration::from_secs(15), || {
        let out = run(&url, &["--json", "status", "job"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["waiters"].as_array().map_or(0, Vec::len) == 1
    });
    if !queued {
        crate::support::send_signal(held.id(), "TERM");
        let _ = held.wait();
        let out = waiter.wait_with_output().unwrap();
        panic!("the waiter never queued: {out:?}{}", server.log_tail());
    }
    assert!(!ran.exists(), "the waiter ran while the lock was held");
    crate::support::send_signal(held.id(), "TERM");
    wait_exit(&mut held, Duration::from_secs(20)).expect("holder ends");
    let status = wait_exit(&mut waiter, Duration::from_secs(20)).expect("the waiter hung");
    assert!(status.success(), "{status:?}");
    assert!(ran.exists(), "the waiter did not run");
}

/// Exit 69 and one line naming the key and the server.
fn assert_unavailable(out: &Output, port: u16) {
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("zks://127.0.0.1:{port}")), "{err}");
    assert!(err.contains("'secure'"), "{err}");
}

/// A server with TLS on its secure port, its certificate signed by a private CA; `None`
/// without openssl (which fails the test: CI installs it).
fn tls_server(dir: &Path, need_client_cert: bool) -> Option<(ZkServer, u16, Pki)> {
    let pki = pki(dir)?;
    // ZooKeeper's PEM key store is the certificate and its key in one file.
    let keystore = dir.join("server-keystore.pem");
    let cert = std::fs::read_to_string(&pki.server_cert).unwrap();
    let key = std::fs::read_to_string(&pki.server_key).unwrap();
    std::fs::write(&keystore, cert + &key).unwrap();
    let (server, port) = ZkServer::start_tls(&keystore, &pki.ca, need_client_cert);
    Some((server, port, pki))
}

/// `zks://` checks the server's certificate against `DLOCK_TLS_CA`: with the CA that signed
/// it `exec` runs over TLS; with another CA, or the system's roots, it is one line, 69.
#[test]
fn tls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let Some((server, port, pki)) = tls_server(dir.path(), false) else {
        panic!("openssl is needed to make the test certificates (apt-get install openssl)");
    };
    let url = format!("zks://127.0.0.1:{port}");
    let out = exec_tls(&url, &[("DLOCK_TLS_CA", &pki.ca)]);
    assert!(out.status.success(), "{out:?}{}", server.log_tail());
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .is_ok(),
        "{out:?}"
    );
    let other = tempfile::tempdir().unwrap();
    let wrong = support::pki(other.path()).expect("openssl");
    assert_unavailable(&exec_tls(&url, &[("DLOCK_TLS_CA", &wrong.ca)]), port);
    assert_unavailable(&exec_tls::<&Path>(&url, &[]), port);
}

/// A server that requires a client certificate takes the one of `DLOCK_TLS_CERT` and
/// `DLOCK_TLS_KEY`, and refuses a client without (one line, 69); a certificate without its
/// key is a usage error.
#[test]
fn tls_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let Some((server, port, pki)) = tls_server(dir.path(), true) else {
        panic!("openssl is needed to make the test certificates (apt-get install openssl)");
    };
    let url = format!("zks://127.0.0.1:{port}");
    let all: [(&str, &Path); 3] = [
        ("DLOCK_TLS_CA", &pki.ca),
        ("DLOCK_TLS_CERT", &pki.client_cert),
        ("DLOCK_TLS_KEY", &pki.client_key),
    ];
    let out = exec_tls(&url, &all);
    assert!(out.status.success(), "{out:?}{}", server.log_tail());
    assert_unavailable(&exec_tls(&url, &all[..1]), port);
    let out = exec_tls(&url, &all[..2]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("DLOCK_TLS_KEY"),
        "{out:?}"
    );
}
