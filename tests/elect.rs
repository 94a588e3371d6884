//! `dlock elect` and `dlock leader` end to end, through the real binary, on every backend:
//! one leader at a time over many terms, the proclamation, a SIGKILLed leader's standby, a
//! clean exit's hand-over (within a second where the store notifies), SIGTERM resigning,
//! `leader --json`, `--here` and `--watch`; `--rejoin` after a lost lease on frozen servers.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::loops::{check_marks, ended, quoted, section, Unended};
use crate::support::Store;
use crate::support::{self, alive, read_when_ready, send_signal, wait_exit, wait_for, Reaped};

on_every_backend!(
    three_candidates_lead_one_at_a_time_with_rising_terms,
    leader_shows_the_proclamation_and_sigterm_resigns,
    a_standby_takes_over_from_a_killed_leader_within_the_ttl,
    a_clean_exit_hands_over_within_a_second_where_the_store_notifies,
    leader_watch_sees_every_change_in_order,
    rejoin_runs_the_command_again_after_a_lost_term,
);

/// `dlock elect NAME EXTRA… -- sh -c SCRIPT`, for the store, its output piped.
fn elect(store: &Store, name: &str, extra: &[&str], script: &str) -> Command {
    let mut c = store.dlock();
    c.args(["elect", name])
        .args(extra)
        .args(["--", "sh", "-c", script]);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// `dlock leader NAME EXTRA…`: its exit code and stdout.
fn leader(store: &Store, name: &str, extra: &[&str]) -> (i32, String) {
    let out = store
        .dlock()
        .args(["leader", name])
        .args(extra)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), support::text(&out.stdout))
}

fn three_candidates_lead_one_at_a_time_with_rising_terms(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let terms = 4;
    let one = format!(
        "{} elect terms -- sh -c {}",
        support::dlock_bin().display(),
        quoted(&section(&marks, "0.05"))
    );
    let loops: Vec<Reaped> = (0..3)
        .map(|_| {
            let script = format!("for i in $(seq {terms}); do {one} || exit $?; done");
            Reaped(store.shell(&script).spawn().unwrap())
        })
        .collect();
    for mut l in loops {
        let status = wait_exit(&mut l.0, Duration::from_secs(120)).expect("the loops end");
        assert!(status.success(), "a candidate failed: {status}");
    }
    assert_eq!(ended(&marks), 3 * terms);
    check_marks(&std::fs::read_to_string(&marks).unwrap(), Unended::Overlap);
}

fn leader_shows_the_proclamation_and_sigterm_resigns(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!(
        "echo \"$$ $DLOCK_FENCING_TOKEN $DLOCK_LEADER_VALUE\" > '{}'; trap 'exit 7' TERM; sleep 60 & wait",
        ready.display()
    );
    assert_eq!(leader(&store, "svc", &[]).0, 3, "nobody leads yet");
    assert_eq!(leader(&store, "svc", &["--here"]).0, 3);
    let mut dlock = Reaped(
        elect(&store, "svc", &["--value", "primary one"], &script)
            .spawn()
            .unwrap(),
    );
    let seen = read_when_ready(&ready, Duration::from_secs(10));
    let fields: Vec<&str> = seen.splitn(3, ' ').collect();
    assert_eq!(fields[2], "primary one", "DLOCK_LEADER_VALUE: {seen}");
    let (code, line) = leader(&store, "svc", &[]);
    assert_eq!(code, 0, "{line}");
    assert!(line.starts_with("primary one (host "), "{line}");
    assert!(line.contains(&format!("pid {}", dlock.id())), "{line}");
    let (code, json) = leader(&store, "svc", &["--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["value"], "primary one");
    assert_eq!(v["leader"], true);
    assert_eq!(v["fencing_token"].to_string(), fields[1]);
    assert_eq!(leader(&store, "svc", &["--here"]).0, 0, "this host leads");
    send_signal(dlock.id(), "TERM");
    let status = wait_exit(&mut dlock.0, Duration::from_secs(10)).expect("dlock resigns");
    assert_eq!(
        status.code(),
        Some(7),
        "CMD's own code, after it got the SIGTERM"
    );
    assert!(!alive(fields[0].parse().unwrap()));
    let (code, line) = leader(&store, "svc", &[]);
    assert_eq!((code, line.as_str()), (3, "none"), "released at once");
}

fn a_standby_takes_over_from_a_killed_leader_within_the_ttl(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let ttl = Duration::from_secs(4);
    let leading = |path: &std::path::Path| format!("echo $$ > '{}'; exec sleep 60", path.display());
    let mut a = Reaped(
        elect(&store, "ha", &["--ttl", "4s"], &leading(&first))
            .spawn()
            .unwrap(),
    );
    let a_cmd: u32 = read_when_ready(&first, Duration::from_secs(10))
        .parse()
        .unwrap();
    // The standby's command says whether the old command still runs when it starts (a
    // zombie, dead but not yet reaped by its new parent, does not).
    let standby = format!(
        "s=$(sed 's/.*) //' /proc/{a_cmd}/stat 2>/dev/null | cut -c1); \
         if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo \"overlap $s\" > '{0}'; else echo $$ > '{0}'; fi; exec sleep 60",
        second.display()
    );
    let b = Reaped(
        elect(&store, "ha", &["--ttl", "4s"], &standby)
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300)); // in line behind the leader
    send_signal(a.id(), "KILL");
    let killed = Instant::now();
    let _ = a.0.wait();
    let took_over = wait_for(ttl + Duration::from_secs(4), || second.exists());
    let took = killed.elapsed();
    assert!(took_over, "no takeover within the TTL plus margin");
    let text = read_when_ready(&second, Duration::from_secs(1));
    assert_ne!(
        text, "overlap",
        "the standby started while the old command lived"
    );
    assert!(!alive(a_cmd), "the killed leader's command outlived it");
    eprintln!("takeover after SIGKILL: {took:?}");
    drop(b);
}

/// The leader's CMD exits 0: dlock exits 0, and the standby's CMD starts after it ended,
/// within a second on a store that wakes waiters (the others poll: within 5 s).
fn a_clean_exit_hands_over_within_a_second_where_the_store_notifies(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let first = format!(
        "echo $$ > '{d}/leads'; while [ ! -e '{d}/go' ]; do sleep 0.01; done; date +%s%N > '{d}/end'"
    );
    let mut a = Reaped(elect(&store, "hand", &[], &first).spawn().unwrap());
    read_when_ready(&dir.path().join("leads"), Duration::from_secs(10));
    let second = format!("date +%s%N > '{d}/start'");
    let mut b = Reaped(elect(&store, "hand", &[], &second).spawn().unwrap());
    if store.caps().queue {
        let queued = wait_for(Duration::from_secs(10), || {
            let out = store.dlock().args(["--json", "status", "hand"]).output();
            let st: serde_json::Value = out
                .ok()
                .and_then(|o| serde_json::from_slice(&o.stdout).ok())
                .unwrap_or_default();
            st["waiters"].as_array().is_some_and(|w| !w.is_empty())
        });
        assert!(queued, "the standby never campaigned");
    } else {
        std::thread::sleep(Duration::from_millis(500)); // campaigning (it polls)
    }
    std::fs::write(dir.path().join("go"), "").unwrap();
    let stamp = |name: &str| -> u128 {
        read_when_ready(&dir.path().join(name), Duration::from_secs(15))
            .parse()
            .unwrap()
    };
    let (end, start) = (stamp("end"), stamp("start"));
    assert!(start > end, "the standby led before the leader's CMD ended");
    let took = Duration::from_nanos((start - end) as u64);
    let limit = match store.caps().notified {
        true => Duration::from_secs(1),
        false => Duration::from_secs(5),
    };
    assert!(took < limit, "hand-over took {took:?} (limit {limit:?})");
    for child in [&mut a, &mut b] {
        let status = wait_exit(&mut child.0, Duration::from_secs(10)).expect("exits");
        assert!(status.success(), "{status:?}");
    }
}

fn leader_watch_sees_every_change_in_order(store: Store) {
    let mut watch = store.dlock();
    watch.args(["--json", "leader", "seq", "--watch"]);
    let mut watch = Reaped(
        watch
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = support::lines_of(watch.0.stdout.take().unwrap());
    let first = lines
        .recv_timeout(Duration::from_secs(10))
        .expect("a first line");
    assert!(first.contains("\"leader\":false"), "{first}");
    // Each leads longer than the longest sleep of `leader --watch` on a store that wakes
    // it only for releases (a second).
    for value in ["a", "b", "c"] {
        let out = elect(&store, "seq", &["--value", value], "sleep 1.5")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 && Instant::now() < deadline {
        let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["leader"] == true {
            seen.push(v["value"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(seen, ["a", "b", "c"], "every leader, in order");
    send_signal(watch.id(), "INT");
    let status = wait_exit(&mut watch.0, Duration::from_secs(5)).expect("watch ends");
    assert_eq!(status.code(), Some(0));
}

/// `--rejoin`: a term lost while the store's servers are frozen past the TTL kills CMD (one
/// lost term, counted in the metrics file), and CMD runs again with a later term once
/// elected again. The local store has no server to freeze (its lease ends only with its
/// process), nor does this test freeze a Redis Cluster's six.
fn rejoin_runs_the_command_again_after_a_lost_term(mut store: Store) {
    if matches!(store, Store::Local(_) | Store::RedisCluster(_)) {
        assert!(!store.freeze(true), "nothing to freeze");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (marks, metrics) = (dir.path().join("marks"), dir.path().join("m.prom"));
    let mut c = store.dlock();
    c.args([
        "-v",
        "elect",
        "re",
        "--ttl",
        "3s",
        "--rejoin",
        "--metrics-file",
    ])
    .arg(&metrics);
    let script = format!(
        "echo \"$$ $DLOCK_FENCING_TOKEN\" >> '{}'; exec sleep 60",
        marks.display()
    );
    c.args(["--", "sh", "-c", &script]);
    let mut dlock = Reaped(
        c.stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = support::lines_of(dlock.0.stderr.take().unwrap());
    let first = read_when_ready(&marks, Duration::from_secs(10));
    let (pid, token): (u32, u64) = {
        let mut f = first.split(' ');
        (
            f.next().unwrap().parse().unwrap(),
            f.next().unwrap().parse().unwrap(),
        )
    };
    assert!(store.freeze(true));
    let frozen = wait_for(Duration::from_secs(6), || !alive(pid));
    // Past the TTL on the servers' clocks too, whatever the test asserts.
    std::thread::sleep(Duration::from_secs(3));
    store.freeze(false);
    assert!(frozen, "CMD outlived the lease");
    let again = wait_for(Duration::from_secs(30), || {
        std::fs::read_to_string(&marks)
            .unwrap_or_default()
            .lines()
            .count()
            >= 2
    });
    if !again {
        let status = dlock.0.try_wait().unwrap();
        let said: Vec<String> = stderr.try_iter().collect();
        panic!(
            "CMD did not run again (dlock: {status:?}): {}",
            said.join("\n")
        );
    }
    let text = std::fs::read_to_string(&marks).unwrap();
    let later: u64 = text
        .lines()
        .nth(1)
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(later > token, "term {later} after {token}");
    assert!(dlock.0.try_wait().unwrap().is_none(), "dlock goes on");
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prom.contains("dlock_elect_lost_terms_total{key=\"re\"} 1"),
        "{prom}"
    );
    let mut said = Vec::new();
    while let Ok(line) = stderr.recv_timeout(Duration::from_millis(100)) {
        said.push(line);
    }
    let said = said.join("\n");
    assert!(
        said.contains("term_lost") || said.contains("lost the leadership"),
        "{said}"
    );
}

/// `--priority` and `--supersede` order jobs waiting their turn; candidates of an election
/// are not jobs: refused in one line (exit 2), even on Redis, which keeps both for `exec`.
#[test]
#[cfg(feature = "redis")]
fn a_campaign_refuses_priority_and_supersede() {
    let server = support::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    for extra in [&["--priority", "10"][..], &["--supersede"]] {
        let mut c = support::dlock();
        c.env("DLOCK_URL", server.url())
            .args(["elect", "camp"])
            .args(extra)
            .args(["--", "touch"])
            .arg(&ran);
        let out = c.output().unwrap();
        let err = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("camp") && err.contains(extra[0]) && err.contains("not a queue"),
            "{err}"
        );
        assert!(!ran.exists(), "CMD ran with {extra:?}");
    }
}
