//! Job control for cron and CI, end to end on every backend: the shell form (`-c`),
//! `--max-runtime` with `--kill-after`, `--if-unavailable skip`, `--hold-at-least`, and a
//! store that cannot be reached. (`dlock wait` is `wait_command.rs`.)

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{self, alive, dlock_bin, read_when_ready, text, wait_exit, wait_for, Store};

on_every_backend!(
    the_shell_form_runs_the_string_with_sh,
    max_runtime_ends_a_command_that_ignores_sigterm,
    max_runtime_ends_a_command_that_obeys_sigterm_at_once,
    skip_when_unavailable_runs_nothing_and_holds_nothing,
    hold_at_least_runs_a_short_job_once_across_skewed_hosts,
    hold_at_least_ends_with_a_long_run_and_not_when_reentered,
    hold_at_least_with_max_runtime_lease_loss_or_a_missing_command,
    an_unreachable_backend_is_one_line_naming_the_key_and_the_backend,
);

fn the_shell_form_runs_the_string_with_sh(store: Store) {
    let out = store
        .dlock()
        .args([
            "exec",
            "shell",
            "-c",
            "echo \"key=$DLOCK_KEY\" | tr a-z A-Z; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "KEY=SHELL");
    let both = store
        .dlock()
        .args(["exec", "shell", "-c", "true", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "-c and CMD together: {both:?}");
}

fn max_runtime_ends_a_command_that_ignores_sigterm(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!("trap '' TERM; echo $$ > '{}'; sleep 30", ready.display());
    let t0 = Instant::now();
    let mut dlock = store
        .dlock()
        .args([
            "exec",
            "wedged",
            "--max-runtime",
            "700ms",
            "--kill-after",
            "700ms",
        ])
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid: u32 = read_when_ready(&ready, Duration::from_secs(10))
        .parse()
        .unwrap();
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock did not exit");
    let took = t0.elapsed();
    assert_eq!(status.code(), Some(124));
    // SIGTERM at 0.7 s is ignored; SIGKILL 0.7 s later ends it.
    assert!(
        took >= Duration::from_millis(1400),
        "ended before the SIGKILL: {took:?}"
    );
    assert!(!alive(pid), "the command survived");
    assert!(!store.held("wedged"), "the lock was not released");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut dlock.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("ran longer than --max-runtime 700ms"), "{err}");
}

fn max_runtime_ends_a_command_that_obeys_sigterm_at_once(store: Store) {
    let t0 = Instant::now();
    let out = store
        .dlock()
        .args([
            "exec",
            "-q",
            "slow",
            "--max-runtime",
            "500ms",
            "--",
            "sleep",
            "30",
        ])
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(out.stderr.is_empty(), "-q printed {out:?}");
    assert!(took >= Duration::from_millis(500), "{took:?}");
    // Well before the default 10 s grace: sleep dies of the SIGTERM.
    assert!(took < Duration::from_secs(5), "{took:?}");
    // A command that finishes in time is not touched.
    let out = store
        .dlock()
        .args([
            "exec",
            "slow",
            "--max-runtime",
            "30s",
            "--",
            "sh",
            "-c",
            "exit 4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
}

/// Takes the store away: the local store's directory cannot be created, a Redis, PostgreSQL or
/// MariaDB server is killed, every node of a Redis Cluster is killed, two of three Redlock (or
/// memcached quorum) servers are killed, the etcd member, a memcached or
/// a ZooKeeper is killed.
pub(crate) fn make_unavailable(store: &mut Store) -> std::process::Command {
    match store {
        Store::Local(dir) => {
            let file = dir.path().join("not-a-dir");
            std::fs::write(&file, "").unwrap();
            let mut c = support::dlock();
            c.env("DLOCK_DIR", file.join("store"));
            c
        }
        Store::Redis(server) => {
            server.kill();
            store.dlock()
        }
        Store::RedisCluster(cluster) => {
            cluster.nodes.iter_mut().for_each(|n| n.kill());
            store.dlock()
        }
        Store::Redlock(servers) => {
            servers[0].kill();
            servers[1].kill();
            store.dlock()
        }
        Store::Postgres(server) => {
            server.kill();
            store.dlock()
        }
        Store::Mysql(server) => {
            server.kill();
            store.dlock()
        }
        Store::Memcached(server) => {
            server.kill();
            store.dlock()
        }
        Store::MemcachedQuorum(servers) => {
            servers[0].kill();
            servers[1].kill();
            store.dlock()
        }
        Store::Zookeeper(server) => {
            server.kill();
            store.dlock()
        }
        Store::Etcd(server) => {
            server.kill();
            store.dlock()
        }
    }
}

fn skip_when_unavailable_runs_nothing_and_holds_nothing(mut store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    let mut dlock = || {
        let mut c = make_unavailable(&mut store);
        // `-n`: a store that stays down is given the least ride-out, not 30 s.
        c.args(["exec", "job", "-n", "--if-unavailable"]);
        c
    };
    let out = dlock().args(["skip", "-c", &touch]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("skipped 'job' (--if-unavailable skip)"),
        "{err}"
    );
    let quiet = dlock()
        .args(["skip", "-q", "-E", "0", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
    assert!(quiet.stderr.is_empty());
    let fail = dlock().args(["fail", "-c", &touch]).output().unwrap();
    assert_eq!(fail.status.code(), Some(69), "{fail:?}");
    assert!(!ran.exists(), "the command ran");
    if let Store::Redlock(servers) = &store {
        // The one server still up holds nothing and queues nobody for 'job'.
        let keys = servers[2].cli(&["--scan", "--pattern", "*job*"]);
        let lease = keys.lines().filter(|k| !k.ends_with(":fence")).count();
        assert_eq!(lease, 0, "left on the live server: {keys}");
    }
    if let Store::MemcachedQuorum(servers) = &store {
        let item = servers[2].ask("mg dlock:lock:job v", |_| true);
        assert_eq!(item, ["EN"], "left on the live server");
    }
}

/// The multi-host cron recipe: two "hosts" (two dlock processes whose cron fires 2 s
/// apart, as with skewed clocks) run a 100 ms job with `-n --hold-at-least 10s`.
fn hold_at_least_runs_a_short_job_once_across_skewed_hosts(store: Store) {
    if matches!(store, Store::Zookeeper(_)) {
        return a_zookeeper_exec_stays_for_its_hold(store);
    }
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let job = format!("echo ran >> '{}'; sleep 0.1", runs.display());
    let host = || {
        let mut c = store.dlock();
        c.args(["exec", "report", "-n", "--hold-at-least", "10s", "-c", &job]);
        c
    };
    let t0 = Instant::now();
    let first = host().output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "dlock waited out the hold"
    );
    // During the hold: held by the finished run, and why.
    let status = store.dlock().args(["status", "report"]).output().unwrap();
    assert_eq!(status.status.code(), Some(0), "not held: {status:?}");
    let table = text(&status.stdout);
    assert!(table.contains("finished, held until"), "{table}");
    assert!(table.contains("by --hold-at-least"), "{table}");
    let json = store
        .dlock()
        .args(["--json", "status", "report"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(v["held_until_ms"].as_u64().is_some(), "{v}");
    assert!(v["held_until"].as_str().is_some(), "{v}");
    // The second host's cron fires 2 s later.
    std::thread::sleep((t0 + Duration::from_secs(2)).saturating_duration_since(Instant::now()));
    let second = host().output().unwrap();
    assert_eq!(second.status.code(), Some(75), "{second:?}");
    assert!(text(&second.stderr).contains("held until"), "{second:?}");
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "ran\n",
        "ran twice"
    );
    // Free once the hold is over: not before 10 s after the first acquisition, not long after.
    assert!(wait_for(Duration::from_secs(16), || !store.held("report")));
    let freed = t0.elapsed();
    assert!(
        freed >= Duration::from_millis(9900),
        "freed after {freed:?}"
    );
    assert!(freed < Duration::from_secs(15), "freed after {freed:?}");
    let third = host().output().unwrap();
    assert_eq!(third.status.code(), Some(0), "{third:?}");
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "ran\nran\n");
}

/// A ZooKeeper `exec` lease is a session, which cannot outlive its process: `exec` stays,
/// its command done, until the hold ends; meanwhile the key is held and the job does not run
/// again.
fn a_zookeeper_exec_stays_for_its_hold(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let job = format!("echo ran >> '{}'", runs.display());
    let host = || {
        let mut c = store.dlock();
        c.args(["exec", "report", "-n", "--hold-at-least", "4s", "-c", &job]);
        c
    };
    let t0 = Instant::now();
    let mut first = host().spawn().unwrap();
    assert!(wait_for(Duration::from_secs(10), || runs.exists()));
    let second = host().output().unwrap();
    assert_eq!(second.status.code(), Some(75), "{second:?}");
    let status = support::wait_exit(&mut first, Duration::from_secs(15)).expect("exec ends");
    assert!(status.success(), "{status:?}");
    assert!(
        t0.elapsed() >= Duration::from_millis(3900),
        "left before the hold ended: {:?}",
        t0.elapsed()
    );
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "ran\n");
    assert!(!store.held("report"));
}

/// A run longer than the hold releases at its end, as without it; a re-entered exec (a
/// nested `dlock exec KEY` inside CMD) does not hold on: its parent's end decides.
fn hold_at_least_ends_with_a_long_run_and_not_when_reentered(store: Store) {
    let out = store
        .dlock()
        .args([
            "exec",
            "long",
            "--hold-at-least",
            "300ms",
            "--",
            "sleep",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        !store.held("long"),
        "a run longer than the hold stayed held"
    );
    let nested = format!(
        "'{}' exec nest --hold-at-least 30s -- true",
        dlock_bin().display()
    );
    let out = store
        .dlock()
        .args(["exec", "nest", "-c", &nested])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!store.held("nest"), "the re-entered exec held on");
}

/// `exec` and `lock` on a store that cannot be reached: exit 69, one line that names the
/// key and the store (its URL, or the local directory).
fn an_unreachable_backend_is_one_line_naming_the_key_and_the_backend(mut store: Store) {
    // `-n`: a store that stays down is given the least ride-out, not 30 s.
    for args in [
        &["exec", "gone", "-n", "--", "true"][..],
        &["lock", "gone", "-n"],
    ] {
        let out = make_unavailable(&mut store).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(69), "{args:?}: {out:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("'gone'"), "{args:?}: {err}");
        let named = match &store {
            Store::Local(dir) => err.contains(&dir.path().display().to_string()),
            _ => err.contains("://"),
        };
        assert!(named, "{args:?}: the store is not named: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
}

/// How `--hold-at-least` meets the other ways a run ends: cut short by `--max-runtime`, it
/// did run, so it holds on (exit 124); a lost lease (79) has nothing to hold; a command that
/// cannot be found (127) did not run, and its lock is released.
fn hold_at_least_with_max_runtime_lease_loss_or_a_missing_command(store: Store) {
    let hold = ["--hold-at-least", "30s"];
    // A ZooKeeper exec stays for its hold instead (`a_zookeeper_exec_stays_for_its_hold`).
    if !matches!(store, Store::Zookeeper(_)) {
        let out = store
            .dlock()
            .args(["exec", "cut", "--max-runtime", "300ms"])
            .args(hold)
            .args(["--", "sleep", "30"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(124), "{out:?}");
        let status = store.dlock().args(["status", "cut"]).output().unwrap();
        assert!(
            text(&status.stdout).contains("by --hold-at-least"),
            "{status:?}"
        );
    }
    let out = store
        .dlock()
        .args(["exec", "missing"])
        .args(hold)
        .args(["--", "/nonexistent/command"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(
        !store.held("missing"),
        "a command that never ran held its key"
    );
    let dir = tempfile::tempdir().unwrap();
    let (dlock, _) = support::hold_with(
        store.dlock(),
        "lost",
        &["--ttl", "3s", "--hold-at-least", "30s"],
        "sleep 30",
        dir.path(),
    );
    let force = store
        .dlock()
        .args(["unlock", "lost", "--force"])
        .output()
        .unwrap();
    assert!(force.status.success(), "{force:?}");
    let out = dlock.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(79), "{out:?}");
    assert!(!store.held("lost"), "a lost lease was held on");
}
