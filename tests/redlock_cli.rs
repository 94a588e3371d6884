//! Redlock through the `dlock` binary, where users would see it: `exec` while servers
//! pause, many contending processes and a herd of waiters, errors and `status` that name
//! servers but never their passwords, one server under two names. (The library under
//! failures is `redlock.rs`.)

use std::process::Child;
use std::time::{Duration, Instant};

use crate::redlock::{dlock, dlock_url, three};
use crate::support::{self, alive, text, wait_exit, RedisServer};

/// Starts `dlock exec renewed --ttl TTL -- sh -c SCRIPT`; returns dlock and the command's pid.
fn hold(servers: &[RedisServer], ttl: &str, script: &str, dir: &std::path::Path) -> (Child, u32) {
    support::hold_with(dlock(servers), "renewed", &["--ttl", ttl], script, dir)
}

#[test]
fn exec_keeps_running_while_a_majority_renews() {
    let servers = three();
    let dir = tempfile::tempdir().unwrap();
    // Four TTLs: the lease must be renewed several times with one server paused.
    let (child, _) = hold(&servers, "400ms", "sleep 1.6; echo done", dir.path());
    servers[0].pause();
    let out = child.wait_with_output().unwrap();
    servers[0].resume();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "done");
}

#[test]
fn exec_kills_the_command_before_the_lease_expires_when_two_are_paused() {
    let servers = three();
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_millis(900);
    let (mut dlock, pid) = hold(&servers, "900ms", "exec sleep 60", dir.path());
    // Each server's expiry right after a renewal: a majority may grant the key again once
    // two of the three have let it expire, at the second expiry in time (renewals that
    // reach the server left running only move its own later).
    let lease = "dlock:{renewed}:lease";
    support::just_renewed(ttl * 2, || servers[0].expiry_ms(lease));
    let mut expiries: Vec<u64> = servers.iter().map(|s| s.expiry_ms(lease)).collect();
    servers[0].pause();
    servers[2].pause();
    expiries.sort_unstable();
    let expires_ms = expiries[1];
    let paused_at = Instant::now();
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock must give up");
    let (dead_ms, took) = (support::now_ms(), paused_at.elapsed());
    servers[0].resume();
    servers[2].resume();
    assert_eq!(status.code(), Some(79));
    assert!(!alive(pid), "the command must be dead");
    assert!(
        dead_ms < expires_ms,
        "killed {}ms after a majority's lease could expire ({took:?} after the pause)",
        dead_ms - expires_ms
    );
    let err = text(&dlock.wait_with_output().unwrap().stderr);
    assert!(err.contains("lost the lease"), "{err}");
    assert!(
        err.contains(&servers[0].url()) && err.contains(&servers[2].url()),
        "names the servers: {err}"
    );
}

#[test]
fn many_contending_processes_never_overlap_and_tokens_increase() {
    let servers = three();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let bin = support::dlock_bin();
    let script = format!(
        "for i in 1 2 3 4 5; do '{}' exec -q contended --ttl 5s -- sh -c \
         'echo start $DLOCK_FENCING_TOKEN >> {log}; sleep 0.01; echo end $DLOCK_FENCING_TOKEN >> {log}' \
         || exit 1; done",
        bin.display(),
        log = log.display()
    );
    let started = Instant::now();
    let workers: Vec<Child> = (0..6)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", &script])
                .env("DLOCK_URL", dlock_url(&servers))
                .env_remove("DLOCK_OWNER")
                .env_remove("DLOCK_OWNERS")
                .spawn()
                .unwrap()
        })
        .collect();
    for mut w in workers {
        let status = wait_exit(&mut w, Duration::from_secs(30)).expect("worker finishes");
        assert!(status.success());
    }
    let took = started.elapsed();
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 60, "30 runs, a start and an end each");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect("a start");
        let end = pair[1]
            .strip_prefix("end ")
            .expect("then its own end: no overlap");
        assert_eq!(start, end, "{pair:?}");
        let token: u64 = start.parse().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
    for s in &servers {
        // Nothing held, and nothing queued: waiters never write queue entries, so only
        // the fencing counter (never deleted) remains, and the marker of unfair waiters,
        // which expires on its own.
        let mut keys: Vec<String> = s
            .cli(&["KEYS", "dlock:*"])
            .lines()
            .map(String::from)
            .collect();
        keys.sort();
        keys.retain(|k| k != "dlock:{contended}:unfair");
        // The run records stay too, until their TTL.
        for record in ["dlock:{contended}:lastok", "dlock:{contended}:lastrun"] {
            let pttl: i64 = s.cli(&["PTTL", record]).parse().unwrap();
            assert!(pttl > 0, "{record} expires: {pttl}");
        }
        keys.retain(|k| !k.ends_with(":lastrun") && !k.ends_with(":lastok"));
        assert_eq!(keys, ["dlock:{contended}:fence"]);
        let pttl: i64 = s
            .cli(&["PTTL", "dlock:{contended}:unfair"])
            .parse()
            .unwrap();
        assert!(pttl == -2 || pttl > 0, "the marker expires: {pttl}");
    }
    println!("30 contended exec runs in {took:?}");
}

#[test]
fn errors_and_status_name_servers_but_never_their_passwords() {
    let secret = "redlock-s3cret";
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(&["--requirepass", secret]))
        .collect();
    let url = |s: &RedisServer| format!("redis://:{secret}@127.0.0.1:{}", s.port);
    let dlock_url = servers.iter().map(url).collect::<Vec<_>>().join(",");
    let run = |args: &[&str]| {
        let out = support::dlock()
            .env("DLOCK_URL", &dlock_url)
            .args(args)
            .output()
            .unwrap();
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!all.contains(secret), "{args:?} leaks the password: {all}");
        (out.status.code(), all)
    };
    assert_eq!(run(&["lock", "k", "--ttl", "1m"]).0, Some(0));
    servers[2].kill();
    let dead = format!("127.0.0.1:{}", servers[2].port);
    for args in [&["status"][..], &["status", "--json"], &["status", "k"]] {
        let (code, all) = run(args);
        assert_eq!(code, Some(0), "{all}");
        assert!(
            all.contains(&dead) && all.contains("***@"),
            "{args:?}: {all}"
        );
    }
    let (code, all) = run(&["exec", "-n", "k", "--", "true"]);
    assert_eq!(code, Some(75), "{all}");
    assert!(all.contains(&dead), "names the server not answering: {all}");
    servers[1].kill();
    let (code, all) = run(&["exec", "-n", "k", "--", "true"]);
    assert_eq!(code, Some(69), "{all}");
    assert!(all.contains(&dead), "{all}");
}

/// A herd of `dlock exec` waiters on one key, with two of the three servers too busy to
/// answer for a while in the middle: every waiter gets the lock in turn, none while
/// another holds it, and none takes the busy servers for dead ones (exit 69).
#[test]
fn a_herd_of_waiters_all_get_the_lock_in_turn() {
    const WAITERS: usize = 300;
    let servers = three();
    let dir = tempfile::tempdir().unwrap();
    let (count, inside, overlaps) = (
        dir.path().join("count"),
        dir.path().join("inside"),
        dir.path().join("overlaps"),
    );
    std::fs::write(&count, "0\n").unwrap();
    // mkdir fails when another command is inside: that is an overlap.
    let script = format!(
        "mkdir '{inside}' || echo overlap >> '{overlaps}'; c=$(cat '{count}'); \
         echo $((c+1)) > '{count}'; rmdir '{inside}'",
        inside = inside.display(),
        overlaps = overlaps.display(),
        count = count.display()
    );
    let started = Instant::now();
    let mut waiters: Vec<Child> = (0..WAITERS)
        .map(|_| {
            dlock(&servers)
                .args(["exec", "-q", "herd", "--ttl", "2s", "--timeout", "120s"])
                .args(["--", "sh", "-c", &script])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let done = || {
        std::fs::read_to_string(&count)
            .ok()
            .and_then(|c| c.trim().parse::<usize>().ok())
            .unwrap_or(0)
    };
    assert!(
        support::wait_for(Duration::from_secs(60), || done() >= WAITERS / 4),
        "the herd makes progress"
    );
    // Longer than a waiter's operation timeout (1 s) and heartbeat (1 s) together.
    servers[0].pause();
    servers[1].pause();
    std::thread::sleep(Duration::from_millis(2_500));
    servers[0].resume();
    servers[1].resume();
    let mut failures = Vec::new();
    for w in &mut waiters {
        let status = wait_exit(w, Duration::from_secs(120)).expect("every waiter finishes");
        if !status.success() {
            let mut err = String::new();
            std::io::Read::read_to_string(w.stderr.as_mut().unwrap(), &mut err).unwrap();
            failures.push(format!("{:?}: {}", status.code(), err.trim()));
        }
    }
    let took = started.elapsed();
    assert!(
        failures.is_empty(),
        "{} of {WAITERS} failed, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert!(!overlaps.exists(), "two commands ran at once");
    assert_eq!(done(), WAITERS, "every command ran once");
    println!("{WAITERS} waiters served in {took:?}");
}

/// One server under two names would vote twice: refused with one line naming both URLs
/// (passwords redacted), exit 2, before anything is locked.
#[test]
fn the_same_server_under_two_names_is_refused() {
    let secret = "twice-s3cret";
    let servers: Vec<RedisServer> = (0..2)
        .map(|_| RedisServer::start_with(&["--requirepass", secret]))
        .collect();
    let (a, b) = (servers[0].port, servers[1].port);
    let cases = [
        vec![
            format!("redis://:{secret}@127.0.0.1:{a}"),
            format!("redis://:{secret}@localhost:{a}"),
        ],
        vec![
            format!("redis://:{secret}@127.0.0.1:{a}"),
            format!("redis://:{secret}@127.0.0.1:{b}"),
            format!("redis://:{secret}@127.0.0.1:{a}/0"),
        ],
    ];
    for urls in &cases {
        let mut cmd = support::dlock();
        for url in urls {
            cmd.args(["-u", url]);
        }
        let out = cmd.args(["exec", "k", "--", "true"]).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{urls:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains(secret), "leaks the password: {err}");
        let (first, again) = (&urls[0], urls.last().unwrap());
        // The credentials are hidden whole, the user's name with the password.
        let shown = |u: &str| u.replace(&format!(":{secret}@"), "***@");
        assert!(
            err.contains(&shown(first)) && err.contains(&shown(again)),
            "names both: {err}"
        );
        assert!(err.contains("same Redis server"), "{err}");
    }
    for s in &servers {
        let keys = s.cli(&["-a", secret, "--no-auth-warning", "KEYS", "dlock:*"]);
        assert_eq!(keys, "", "nothing was locked");
    }

    // An ACL user without INFO cannot tell: distinct servers still work.
    let acl = [
        "--user",
        "alice",
        "on",
        ">pw",
        "~dlock:*",
        "&dlock:*",
        "+@all",
        "-@dangerous",
    ];
    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start_with(&acl)).collect();
    let mut cmd = support::dlock();
    for s in &servers {
        cmd.args(["-u", &format!("redis://alice:pw@127.0.0.1:{}", s.port)]);
    }
    let out = cmd.args(["exec", "k", "--", "true"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}
