//! Input and output at the edges, through the real binary: absurd durations, empty backend
//! URLs, and a stdout that is closed or whose reader went away.

use std::process::{Command, Output, Stdio};

use crate::support::{self, Store};

on_every_backend!(
    a_reader_gone_ends_status_output_quietly,
    lock_that_cannot_print_its_owner_holds_nothing,
);

fn one_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Runs `cmd` with its stdout a pipe whose reading end is already closed. Closed before the
/// spawn: a process forked meanwhile by another test of this binary would otherwise keep a
/// copy of the reading end open until it execs, and a write could succeed.
fn with_reader_gone(mut cmd: Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    cmd.stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn a_reader_gone_ends_status_output_quietly(store: Store) {
    let lock = store
        .dlock()
        .args(["lock", "piped", "--ttl", "1m"])
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    for json in [false, true] {
        let mut status = store.dlock();
        status.arg("status");
        if json {
            status.arg("--json");
        }
        let out = with_reader_gone(status);
        assert_eq!(out.status.code(), Some(0), "json {json}: {out:?}");
        assert!(out.stderr.is_empty(), "json {json}: {out:?}");
    }
}

fn lock_that_cannot_print_its_owner_holds_nothing(store: Store) {
    let mut lock = store.dlock();
    lock.args(["lock", "undelivered", "--ttl", "1m"]);
    let out = with_reader_gone(lock);
    assert_eq!(out.status.code(), Some(70), "{out:?}");
    let err = one_line(&out);
    assert!(
        err.contains("'undelivered'") && err.contains("released it"),
        "{err}"
    );
    assert!(!store.held("undelivered"), "the lease was left held");

    // Started with stdout closed: refused before anything is acquired.
    let exe = support::dlock_bin();
    let sh = format!("exec '{}' lock closed --ttl 1m >&-", exe.display());
    let out = store.shell(&sh).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(one_line(&out).contains("stdout is closed"));
    assert!(!store.held("closed"), "the lease was taken");
    // `>/dev/null` is the caller's choice, and still locks.
    let sh = format!("exec '{}' lock devnull --ttl 1m >/dev/null", exe.display());
    assert!(store.shell(&sh).status().unwrap().success());
    assert!(store.held("devnull"));
}

#[test]
fn absurd_timeouts_are_refused_in_one_line() {
    let store = Store::local();
    for (cmd, value) in [
        ("exec", "500000000000y"),
        ("lock", "18446744073709551615s"),
        ("lock", "18446744073709551615"),
    ] {
        let mut c = store.dlock();
        c.args([cmd, "k", "--timeout", value]);
        if cmd == "exec" {
            c.args(["--", "true"]);
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd} {value}: {out:?}");
        assert!(one_line(&out).contains(value));
    }
    assert!(!store.held("k"));
}

#[test]
fn an_empty_url_is_an_error_not_the_local_store() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    let runs = |c: &mut Command| {
        c.args(["exec", "k", "--", "sh", "-c", &touch])
            .env("DLOCK_DIR", dir.path());
        c.output().unwrap()
    };
    for url in ["", " ", ","] {
        let out = runs(support::dlock().args(["-u", url]));
        assert_eq!(out.status.code(), Some(2), "-u {url:?}: {out:?}");
        assert!(one_line(&out).contains("URL is empty"));
    }
    let out = runs(support::dlock().env("DLOCK_URL", ""));
    assert_eq!(out.status.code(), Some(2), "DLOCK_URL='': {out:?}");
    assert!(one_line(&out).contains("DLOCK_URL"));
    assert!(!ran.exists(), "the command ran");
    // No URL at all is the local store.
    let out = runs(&mut support::dlock());
    assert!(out.status.success(), "{out:?}");
    assert!(ran.exists());
}
