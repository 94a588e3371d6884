//! The last-run record `exec` leaves in the store, as `status KEY` shows it, and
//! `status --watch` without a terminal, on every backend.

use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, Store};

on_every_backend!(
    success_then_failure_keeps_the_last_success,
    a_command_killed_by_sigkill_is_recorded,
    a_lost_lease_is_recorded,
    records_are_not_listed_as_locks,
    status_watch_without_a_terminal_prints_each_change,
    status_watch_on_a_terminal_redraws_and_ends_on_ctrl_c,
);

fn exec(store: &Store, key: &str, script: &str) -> Output {
    store
        .dlock()
        .args(["exec", key, "--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// `status --json KEY`, parsed.
fn status_json(store: &Store, key: &str) -> Value {
    let out = store
        .dlock()
        .args(["status", "--json", key])
        .output()
        .unwrap();
    assert!(out.stderr.is_empty(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// `status KEY` as text.
fn status_text(store: &Store, key: &str) -> String {
    let out = store.dlock().args(["status", key]).output().unwrap();
    assert!(out.stderr.is_empty(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn line_with<'a>(text: &'a str, what: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what:?} in:\n{text}"))
}

fn success_then_failure_keeps_the_last_success(store: Store) {
    let none = status_json(&store, "lr");
    assert!(
        none["last_run"].is_null() && none["last_success"].is_null(),
        "{none}"
    );
    assert!(status_text(&store, "lr").contains("  last run: none on record"));

    let out = exec(&store, "lr", "sleep 0.2");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let st = status_json(&store, "lr");
    let last = &st["last_run"];
    assert_eq!(last["exit_code"], 0, "{st}");
    assert_eq!(last["succeeded"], true);
    assert_eq!(last["outcome"], "ok (exit 0)");
    assert_eq!(last["command"], "sh -c sleep 0.2");
    assert!(last["ran_ms"].as_u64().unwrap() >= 200, "{st}");
    assert!(last["fencing_token"].as_u64().unwrap() >= 1);
    assert_eq!(st["last_success"], st["last_run"]);
    // The fields `status --json` had before stay as they were.
    assert_eq!(st["key"], "lr");
    assert_eq!(st["held"], false);
    let host = last["host"].as_str().unwrap().to_string();
    let text = status_text(&store, "lr");
    let line = line_with(&text, "last run:");
    assert!(
        line.starts_with("  last run: ok (exit 0) ")
            && line.contains(&format!("s ago on {host}, ran ")),
        "{text}"
    );
    assert!(!text.contains("last success"), "{text}");

    let out = exec(&store, "lr", "exit 3");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let st2 = status_json(&store, "lr");
    assert_eq!(st2["last_run"]["exit_code"], 3, "{st2}");
    assert_eq!(st2["last_run"]["succeeded"], false);
    assert_eq!(st2["last_success"], st["last_run"], "the success is kept");
    let text = status_text(&store, "lr");
    assert!(
        line_with(&text, "last run:").starts_with("  last run: failed (exit 3) "),
        "{text}"
    );
    assert!(
        line_with(&text, "last success:").contains(&format!("ago on {host}, ran ")),
        "{text}"
    );
}

fn a_command_killed_by_sigkill_is_recorded(store: Store) {
    let out = exec(&store, "lk", "kill -9 $$");
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let st = status_json(&store, "lk");
    assert_eq!(st["last_run"]["exit_code"], 137, "{st}");
    assert_eq!(st["last_run"]["signal"], 9);
    assert!(st["last_success"].is_null(), "{st}");
    let text = status_text(&store, "lk");
    assert!(
        line_with(&text, "last run:").starts_with("  last run: killed by signal 9 (exit 137) "),
        "{text}"
    );
    assert_eq!(line_with(&text, "last success:"), "  last success: never");
}

fn a_lost_lease_is_recorded(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    // TTL in whole seconds, three at least (memcached): renewed every second.
    let (mut holder, _) = support::hold_with(
        store.dlock(),
        "ll",
        &["--ttl", "3s"],
        "sleep 60",
        dir.path(),
    );
    let out = store
        .dlock()
        .args(["unlock", "ll", "--force"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let status = support::wait_exit(&mut holder, Duration::from_secs(10)).expect("exec ends");
    assert_eq!(status.code(), Some(79));
    let st = status_json(&store, "ll");
    assert_eq!(st["last_run"]["lease_lost"], true, "{st}");
    assert_eq!(st["last_run"]["exit_code"], 79);
    assert_eq!(st["last_run"]["outcome"], "lease lost (exit 79)");
    let text = status_text(&store, "ll");
    assert_eq!(line_with(&text, "last success:"), "  last success: never");
}

fn records_are_not_listed_as_locks(store: Store) {
    for key in ["nl", "nl/x"] {
        assert!(exec(&store, key, "true").status.success());
    }
    let out = store.dlock().args(["status"]).output().unwrap();
    let text = support::text(&out.stdout);
    assert!(
        text.starts_with("no locks held on") && !text.contains('\n'),
        "{out:?}"
    );
    let out = store
        .dlock()
        .args(["lock", "other", "--ttl", "30s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = store.dlock().args(["status", "--json"]).output().unwrap();
    let lines: Vec<Value> = support::text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{out:?}");
    assert_eq!(lines[0]["key"], "other");
    assert!(
        lines[0].get("last_run").is_none(),
        "a listing leaves runs out"
    );
}

fn status_watch_without_a_terminal_prints_each_change(store: Store) {
    let mut watch = support::Reaped(
        store
            .dlock()
            .args(["status", "--watch", "wk"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = support::lines_of(watch.stdout.take().unwrap());
    let wait_line = |what: &str| loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l.contains(what) => return l,
            Ok(_) => {}
            Err(e) => panic!("no line with {what:?}: {e}"),
        }
    };
    wait_line("--- ");
    wait_line("wk   (free)");
    wait_line("last run: none on record");
    assert!(exec(&store, "wk", "exit 4").status.code() == Some(4));
    // Snapshots may show it held, then held with its record; the last one free with it.
    let mut free = false;
    loop {
        let line = wait_line("");
        if line.starts_with("--- ") {
            free = false;
        }
        free |= line.starts_with("wk   (free)");
        if free && line.contains("last run: failed (exit 4)") {
            break;
        }
    }
    wait_line("backend: ");
    // Nothing changes any more: no new snapshot, although the view looks every second.
    assert!(rx.recv_timeout(Duration::from_millis(2500)).is_err());
    support::send_signal(watch.id(), "INT");
    let status = support::wait_exit(&mut watch, Duration::from_secs(5)).expect("ends on SIGINT");
    assert_eq!(status.code(), Some(0));
}

/// On a terminal (a pty from util-linux `script`), the view is redrawn in place, shows a
/// run as it is recorded, and Ctrl-C typed on the terminal ends it with exit 0.
/// dlock's stdout is a pseudo-terminal the test opens itself (no `script(1)`, whose
/// `-c` runs through `$SHELL` and so depends on the caller's login shell); Ctrl-C is the
/// SIGINT a terminal sends its foreground group.
fn status_watch_on_a_terminal_redraws_and_ends_on_ctrl_c(store: Store) {
    use std::io::Read;
    let pty = nix::pty::openpty(None, None).expect("a pseudo-terminal");
    let mut term = support::Reaped(
        store
            .dlock()
            .args(["status", "--watch", "tk"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(pty.slave))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The spawned Command held the only other copy of the slave end: once dlock exits,
    // reads on the master end fail and the reader below stops.
    let (tx, rx) = mpsc::channel();
    let mut master = std::fs::File::from(pty.master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    });
    let mut seen = String::new();
    let mut wait_for = |what: &str| {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !seen.contains(what) {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(chunk) => seen.push_str(&chunk),
                Err(_) => panic!("no {what:?} on the terminal: {seen:?}"),
            }
        }
        seen.clear();
    };
    wait_for("\x1b[H\x1b[2Jdlock status --watch");
    wait_for("last run: none on record");
    assert!(exec(&store, "tk", "true").status.success());
    wait_for("last run: ok (exit 0)");
    // Later frames are drawn over the last one, without clearing the screen first.
    wait_for("\x1b[Hdlock status --watch");
    let pid = nix::unistd::Pid::from_raw(term.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = support::wait_exit(&mut term, Duration::from_secs(10)).expect("ends on Ctrl-C");
    let mut err = String::new();
    term.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "a stopped view is a normal end: {err}"
    );
    assert!(err.is_empty(), "{err}");
}

/// On Redis, `exec` writes its run's record in the release script: no command of its own
/// reaches the server (MONITOR shows the script's writes as `lua`), and both records are
/// there, each run's before the next holder's.
#[cfg(feature = "redis")]
#[test]
fn redis_writes_the_record_with_the_release() {
    let mut store = Store::redis();
    let port = store.server().port.to_string();
    let mut monitor = std::process::Command::new("redis-cli")
        .args(["-p", &port, "MONITOR"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = support::lines_of(monitor.stdout.take().unwrap());
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).as_deref(), Ok("OK"));
    assert!(exec(&store, "rec", "exit 0").status.success());
    assert_eq!(exec(&store, "rec", "exit 3").status.code(), Some(3));
    // A marker after both runs: everything they sent is before it.
    store.server().cli(&["ECHO", "end-of-runs"]);
    let mut sent = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        if line.contains("end-of-runs") {
            break;
        }
        sent.push(line);
    }
    let _ = monitor.kill();
    let _ = monitor.wait();
    let by_clients: Vec<&String> = sent.iter().filter(|l| !l.contains(" lua]")).collect();
    let writes = ["\"SET\"", "\"MULTI\"", "\"EXEC\""];
    let own = by_clients
        .iter()
        .filter(|l| writes.iter().any(|w| l.contains(w)));
    assert_eq!(own.count(), 0, "{by_clients:#?}");
    let in_scripts = sent
        .iter()
        .filter(|l| l.contains(" lua]") && l.contains("\"SET\""));
    assert_eq!(
        in_scripts.count(),
        3,
        "two last runs and one last success: {sent:#?}"
    );
    let st = status_json(&store, "rec");
    assert_eq!(st["last_run"]["exit_code"], 3, "{st}");
    assert_eq!(st["last_success"]["exit_code"], 0, "{st}");
}
