//! Job control for cron and CI, end to end on every backend: the shell form (`-c`),
//! `--max-runtime` with `--kill-after`, and `--if-unavailable skip`.

#[macro_use]
mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{alive, read_when_ready, wait_exit, Store};

on_every_backend!(
    the_shell_form_runs_the_string_with_sh,
    max_runtime_ends_a_command_that_ignores_sigterm,
    max_runtime_ends_a_command_that_obeys_sigterm_at_once,
    skip_when_unavailable_runs_nothing_and_holds_nothing,
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

fn held(store: &Store, key: &str) -> bool {
    store
        .dlock()
        .args(["status", key])
        .output()
        .unwrap()
        .status
        .code()
        == Some(0)
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
    assert!(!held(&store, "wedged"), "the lock was not released");
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

/// Takes the store away: the local store's directory cannot be created, a Redis server is
/// killed, two of three Redlock servers are killed.
fn make_unavailable(store: &mut Store) -> std::process::Command {
    match store {
        Store::Local(dir) => {
            let file = dir.path().join("not-a-dir");
            std::fs::write(&file, "").unwrap();
            let mut c = common::dlock();
            c.env("DLOCK_DIR", file.join("store"));
            c
        }
        Store::Redis(server) => {
            server.kill();
            store.dlock()
        }
        Store::Redlock(servers) => {
            servers[0].kill();
            servers[1].kill();
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
        c.args(["exec", "job", "--if-unavailable"]);
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
}
