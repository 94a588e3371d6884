//! `dlock exec` end to end, through the real binary, on every backend: exclusion, exit
//! codes, environment, signals, renewal, and bad input.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, alive, read_when_ready, send_signal, wait_exit, wait_for, Store};

on_every_backend!(
    runs_the_command_with_the_lease_in_its_environment,
    passes_exit_codes_through,
    missing_and_unexecutable_commands_release_the_lock,
    no_wait_on_a_held_key_gives_the_conflict_code,
    timeout_gives_up_in_time,
    concurrent_execs_never_overlap_and_tokens_increase,
    forwards_signals_to_the_command,
    signal_while_waiting_cancels_cleanly,
    sigkill_of_dlock_kills_the_command,
    an_ignored_sigchld_does_not_lose_the_command,
    renewal_keeps_a_short_lease_alive,
    nested_exec_reenters,
    bad_input_is_one_line_and_exit_2,
    a_wait_is_shown_and_listed,
    a_killed_waiter_does_not_stall_the_queue,
);

fn sh(store: &Store, key: &str, script: &str) -> Command {
    let mut c = store.dlock();
    c.args(["exec", key, "--", "sh", "-c", script]);
    c
}

/// Holds `key` with `extra` options while the command sleeps; returns dlock and its pid.
fn hold(
    store: &Store,
    key: &str,
    dir: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, u32) {
    support::hold_with(store.dlock(), key, extra, "exec sleep 60", dir)
}

fn runs_the_command_with_the_lease_in_its_environment(store: Store) {
    let out = sh(
        &store,
        "env-key",
        "echo $DLOCK_KEY $DLOCK_FENCING_TOKEN $DLOCK_OWNER",
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{text}");
    assert_eq!(fields[0], "env-key");
    let first: u64 = fields[1].parse().unwrap();
    assert_eq!(fields[2].len(), 16, "owner id: {}", fields[2]);
    let second = support::token_of(store.dlock().args(["exec", "env-key"]));
    assert!(
        second > first,
        "tokens must increase: {first} then {second}"
    );
}

fn passes_exit_codes_through(store: Store) {
    for (script, code) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 255", 255),
        ("kill -9 $$", 137),
        ("kill -TERM $$", 143),
    ] {
        let status = sh(&store, "codes", script).status().unwrap();
        assert_eq!(status.code(), Some(code), "{script}");
    }
}

fn missing_and_unexecutable_commands_release_the_lock(store: Store) {
    let out = store
        .dlock()
        .args(["exec", "missing", "--", "/no/such/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not found"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap(); // not executable
    let status = store
        .dlock()
        .args(["exec", "missing", "--"])
        .arg(&script)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(126));
    let status = store
        .dlock()
        .args(["exec", "missing", "-n", "--", "true"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0), "the lock must have been released");
}

fn no_wait_on_a_held_key_gives_the_conflict_code(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, _) = hold(&store, "busy", dir.path(), &[]);
    let started = Instant::now();
    let out = store
        .dlock()
        .args(["exec", "busy", "-n", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "--no-wait must not wait"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("busy"), "names the key: {err}");
    let status = store
        .dlock()
        .args(["exec", "busy", "--nonblock", "-E", "9", "--", "true"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(9));
    holder.kill().unwrap();
    holder.wait().unwrap();
}

fn timeout_gives_up_in_time(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, _) = hold(&store, "slow", dir.path(), &[]);
    let started = Instant::now();
    let status = store
        .dlock()
        .args(["exec", "slow", "-q", "--timeout", "400ms", "--", "true"])
        .status()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(status.code(), Some(75));
    assert!(
        took >= Duration::from_millis(400),
        "gave up early: {took:?}"
    );
    assert!(took < Duration::from_secs(3), "gave up late: {took:?}");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

fn concurrent_execs_never_overlap_and_tokens_increase(store: Store) {
    execs_never_overlap(&store, 8, 4);
}

/// `procs` loops of `rounds` × `dlock exec contended` at once: every one succeeds (no exit
/// 69 from a server that refuses connections), no two commands overlap, and tokens increase
/// in the order of the runs.
pub(crate) fn execs_never_overlap(store: &Store, procs: usize, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "echo start $DLOCK_FENCING_TOKEN >> '{0}'; sleep 0.01; echo end $DLOCK_FENCING_TOKEN >> '{0}'",
        log.display()
    );
    let children: Vec<_> = (0..procs)
        .map(|_| {
            let loop_script = format!(
                "for i in $(seq {rounds}); do {} exec contended -- sh -c \"{}\" || exit $?; done",
                support::dlock_bin().display(),
                script.replace('"', "\\\"").replace('$', "\\$")
            );
            store.shell(&loop_script).spawn().unwrap()
        })
        .collect();
    for mut child in children {
        let status = child.wait().unwrap();
        assert!(status.success(), "a loop of {procs} failed: {status}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), procs * rounds * 2);
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let (s, e) = (pair[0], pair[1]);
        let token: u64 = s
            .strip_prefix("start ")
            .expect("a start line")
            .parse()
            .unwrap();
        assert_eq!(e, format!("end {token}"), "overlap: {s} followed by {e}");
        assert!(
            token > last,
            "tokens must increase in acquisition order: {last} then {token}"
        );
        last = token;
    }
}

/// Whether signal `num` is ignored in this process (its `SigIgn` mask), and so in every
/// process it starts.
fn ignored_here(num: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    mask & (1 << (num - 1)) != 0
}

fn forwards_signals_to_the_command(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    for (sig, num, code) in [
        ("USR1", 10, 41),
        ("TERM", 15, 42),
        ("INT", 2, 43),
        ("HUP", 1, 44),
        ("QUIT", 3, 45),
        ("USR2", 12, 46),
    ] {
        if ignored_here(num) {
            // Ignored by whoever started the tests (SIGINT under a background `&`): dlock and
            // CMD start with it ignored, as documented, and it is not delivered at all.
            continue;
        }
        let _ = std::fs::remove_file(&ready);
        let script = format!(
            "trap 'exit {code}' {sig}; echo $$ > '{}'; while :; do sleep 0.01; done",
            ready.display()
        );
        let mut child = sh(&store, "signals", &script).spawn().unwrap();
        read_when_ready(&ready, Duration::from_secs(10));
        send_signal(child.id(), sig);
        let status = wait_exit(&mut child, Duration::from_secs(5)).expect("dlock should exit");
        assert_eq!(
            status.code(),
            Some(code),
            "SIG{sig} forwarded and the code passed through"
        );
    }
    let status = store
        .dlock()
        .args(["exec", "signals", "-n", "--", "true"])
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "released after the forwarded signal"
    );
}

fn signal_while_waiting_cancels_cleanly(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, _) = hold(&store, "queue", dir.path(), &[]);
    let marker = dir.path().join("ran");
    let mut waiter = store
        .dlock()
        .args(["exec", "queue", "-q", "--", "touch"])
        .arg(&marker)
        .spawn()
        .unwrap();
    await_queued(&store, "queue", &[waiter.id()]);
    send_signal(waiter.id(), "INT");
    let status = wait_exit(&mut waiter, Duration::from_secs(5)).expect("cancelled wait must end");
    assert_eq!(status.code(), Some(130));
    send_signal(holder.id(), "TERM"); // forwarded: the holder ends and releases
    wait_exit(&mut holder, Duration::from_secs(5)).expect("holder ends");
    // Nothing left held or queued: a no-wait acquisition succeeds at once, and the
    // cancelled command never ran.
    let status = store
        .dlock()
        .args(["exec", "queue", "-n", "--", "true"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!marker.exists());
}

fn sigkill_of_dlock_kills_the_command(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let k = store.slowdown(Duration::from_secs(1));
    let ttl = format!("{k}s");
    let (mut holder, pid) = hold(&store, "killed", dir.path(), &["--ttl", &ttl]);
    assert!(alive(pid));
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    assert!(
        wait_for(Duration::from_secs(2), || !alive(pid)),
        "the command outlived dlock"
    );
    // The lease is left to expire (Redis) or freed at once (local): either way it comes back.
    let status = store
        .dlock()
        .args(["exec", "killed", "-w", "5s", "--", "true"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Started with SIGCHLD ignored (as some daemons leave it), dlock still sees CMD end and
/// passes its code through: the kernel would otherwise reap CMD unseen and dlock wait forever.
fn an_ignored_sigchld_does_not_lose_the_command(store: Store) {
    let script = format!(
        "exec env --ignore-signal=CHLD '{}' exec ignored-chld -- sh -c 'exit 3'",
        support::dlock_bin().display()
    );
    let mut child = store.shell(&script).spawn().unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(10));
    if status.is_none() {
        let _ = child.kill();
    }
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(3),
        "dlock never saw CMD end"
    );
}

fn renewal_keeps_a_short_lease_alive(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let k = store.slowdown(Duration::from_millis(300));
    let ttl = format!("{}ms", 300 * k);
    let (mut holder, _) = hold(&store, "renewed", dir.path(), &["--ttl", &ttl]);
    // Well past several TTLs, the lease is still held.
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(200) * k);
        let status = store
            .dlock()
            .args(["exec", "renewed", "-n", "-q", "--", "true"])
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(75), "the lease expired despite renewal");
    }
    assert!(holder.try_wait().unwrap().is_none(), "holder still running");
    send_signal(holder.id(), "TERM");
    let status = wait_exit(&mut holder, Duration::from_secs(5)).unwrap();
    assert_eq!(status.code(), Some(143));
}

fn nested_exec_reenters(store: Store) {
    let bin = support::dlock_bin();
    let script = format!(
        "outer=$DLOCK_FENCING_TOKEN; {} exec nest -n -- sh -c 'echo $DLOCK_FENCING_TOKEN' > inner.txt || exit 9; \
         [ \"$(cat inner.txt)\" = \"$outer\" ] || exit 8; {} exec other -n -- true || exit 7",
        bin.display(),
        bin.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let status = sh(&store, "nest", &script)
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "nested exec re-enters with the same token"
    );
    let status = store
        .dlock()
        .args(["exec", "nest", "-n", "--", "true"])
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "released after the outer exec ended"
    );
}

fn bad_input_is_one_line_and_exit_2(store: Store) {
    let cases: &[&[&str]] = &[
        &["exec", "", "--", "true"],
        &["exec", "k", "--ttl", "soon", "--", "true"],
        &["exec", "k", "--ttl", "0", "--", "true"],
        &["exec", "k", "--ttl", "1000y", "--", "true"],
        &["exec", "k", "--timeout", "-1", "--", "true"],
        &["exec", "k", "-E", "300", "--", "true"],
        &["exec", "k"],
        &["lock", "k", "--bogus"],
    ];
    for args in cases {
        let out = store.dlock().args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, not {err}");
        assert!(err.starts_with("dlock: "), "{args:?}: {err}");
    }
}

/// The queue of `key` as `status --json` lists it; `None` when the backend cannot tell,
/// which must be so exactly where the store declares no queue (`Store::caps`).
fn queue_of(store: &Store, key: &str) -> Option<Vec<serde_json::Value>> {
    let out = store
        .dlock()
        .args(["status", key, "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let queue = v["waiters"].as_array().cloned();
    assert_eq!(
        queue.is_some(),
        store.caps().queue,
        "status lists waiters exactly where a queue is declared: {v}"
    );
    queue
}

/// Waits until `n` waiters wait on `key`: listed in its queue or, on Redlock (no queue),
/// subscribed to its release channel (each on one server, all servers being up), or, on
/// memcached (no queue, no subscription), each connected to the (first) server. The
/// connections are seen from the waiters' side: memcached's own count of connections
/// lags behind closed ones, so it can show a waiter that has not started yet.
fn await_queued(store: &Store, key: &str, waiters: &[u32]) {
    let n = waiters.len();
    let connected = |port: u16| {
        waiters
            .iter()
            .all(|&pid| support::tcp_peer_ports(pid).contains(&port))
    };
    let queued = wait_for(Duration::from_secs(10), || match store {
        Store::Redlock(servers) => {
            let channel = format!("dlock:{{{key}}}:released");
            let subscribed: usize = servers
                .iter()
                .map(|s| {
                    let reply = s.cli(&["PUBSUB", "NUMSUB", &channel]);
                    reply
                        .lines()
                        .nth(1)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0)
                })
                .sum();
            subscribed == n
        }
        Store::Memcached(server) => connected(server.port),
        Store::MemcachedQuorum(servers) => connected(servers[0].port),
        _ => queue_of(store, key).is_some_and(|q| q.len() == n),
    });
    assert!(queued, "{n} waiter(s) never showed waiting on {key}");
}

/// Off a terminal, a waiter says once that it waits, for whom and where it stands, and
/// `status` lists it; `-q` says nothing.
fn a_wait_is_shown_and_listed(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, _) = hold(&store, "shown", dir.path(), &[]);
    let waiter = |quiet: bool| {
        let mut c = store.dlock();
        c.args(["exec", "shown"]);
        if quiet {
            c.arg("-q");
        }
        c.args(["--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut quiet = waiter(true);
    await_queued(&store, "shown", &[quiet.id()]);
    let mut loud = waiter(false);
    // Its first line, read on a thread so that a missing line fails instead of hanging.
    let stderr = loud.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stderr).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no waiting line");
    assert!(line.starts_with("dlock: waiting for 'shown' on "), "{line}");
    assert!(line.contains(&format!(" pid {} (", holder.id())), "{line}");
    if let Some(queue) = queue_of(&store, "shown") {
        // A store with a queue (`queue_of` checks it lists one exactly then).
        assert!(line.contains("position 2 of 2"), "{line}");
        let pids: Vec<u64> = queue.iter().map(|w| w["pid"].as_u64().unwrap()).collect();
        assert_eq!(pids, [quiet.id() as u64, loud.id() as u64], "{queue:?}");
        assert!(queue[1]["waited_ms"].as_u64().unwrap() >= 200, "{queue:?}");
        assert!(queue[1]["waiting_since"].is_string(), "{queue:?}");
    }
    send_signal(holder.id(), "TERM"); // forwarded: the holder ends and releases
    wait_exit(&mut holder, Duration::from_secs(5)).expect("holder ends");
    for w in [&mut quiet, &mut loud] {
        let status = wait_exit(w, Duration::from_secs(10)).expect("waiter ends");
        assert_eq!(status.code(), Some(0));
    }
    let out = quiet.wait_with_output().unwrap();
    assert!(out.stderr.is_empty(), "-q printed: {:?}", out.stderr);
}

/// A waiter killed outright (SIGKILL: no chance to leave the queue) does not keep the one
/// behind it waiting past its liveness window (Redis: 4 s without a refresh; the local
/// store: at once, its lock goes with it; etcd: its lease's TTL, 3 s here), and never runs
/// its command.
fn a_killed_waiter_does_not_stall_the_queue(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, _) = hold(&store, "ghost", dir.path(), &[]);
    let marker = |name: &str| dir.path().join(name);
    let waiter = |name: &str| {
        store
            .dlock()
            // ZooKeeper keeps a waiter's node until its session (of --ttl) expires.
            .args(["exec", "ghost", "-q", "--ttl", "3s", "--", "touch"])
            .arg(marker(name))
            .spawn()
            .unwrap()
    };
    let mut first = waiter("first");
    await_queued(&store, "ghost", &[first.id()]);
    let mut second = waiter("second");
    await_queued(&store, "ghost", &[first.id(), second.id()]);
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    send_signal(holder.id(), "TERM"); // forwarded: the holder ends and releases
    wait_exit(&mut holder, Duration::from_secs(5)).expect("holder ends");
    let released = Instant::now();
    let status = wait_exit(&mut second, Duration::from_secs(10));
    let waited = released.elapsed();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "stalled for {waited:?}"
    );
    assert!(waited < Duration::from_secs(7), "stalled for {waited:?}");
    assert!(marker("second").exists());
    assert!(!marker("first").exists(), "the killed waiter's command ran");
    if let Some(queue) = queue_of(&store, "ghost") {
        assert!(queue.is_empty(), "left in the queue: {queue:?}");
    }
}
