//! One message is one line, on every backend: a holder's command with newlines and escape
//! sequences, read back from the store, never splits a line of dlock's or reaches the
//! terminal raw, in errors, `-v` events, the waiting line or the `status` table.

use std::process::Output;

use crate::support::{self, Reaped, Store};

on_every_backend!(a_holder_s_command_is_shown_escaped_on_one_line);

/// What the holder runs after the newline: a comment, and a colour change.
const TAIL: &str = "sleep 20\n# second line \x1b[31mred";

fn a_holder_s_command_is_shown_escaped_on_one_line(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (holder, _) = support::hold_with(store.dlock(), "ml", &[], TAIL, dir.path());
    let _holder = Reaped(holder);
    let no_wait = run(&store, &["exec", "-n", "ml", "--", "true"]);
    assert_eq!(no_wait.status.code(), Some(75), "{no_wait:?}");
    let lines = stderr_lines(&no_wait);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(r"sleep 20\n# second line \e[31mred"),
        "{lines:?}"
    );
    for args in [
        &["exec", "ml", "--timeout", "1s", "--", "true"][..],
        &["-v", "exec", "ml", "--timeout", "1s", "--", "true"],
    ] {
        let timed_out = run(&store, args);
        assert_eq!(timed_out.status.code(), Some(75), "{args:?}: {timed_out:?}");
        let lines = stderr_lines(&timed_out);
        let last = lines.last().expect("an error line");
        assert!(last.contains("gave up after"), "{args:?}: {lines:?}");
        assert!(last.contains(r"\e[31mred"), "{args:?}: {lines:?}");
    }
    let status = run(&store, &["status", "ml"]);
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    let table = String::from_utf8(status.stdout.clone()).unwrap();
    assert_clean(&table, "status ml");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("ml ")).collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert!(rows[0].ends_with(r"# second line \e[31mred"), "{table}");
    let all = run(&store, &["status"]);
    assert_eq!(all.status.code(), Some(0), "{all:?}");
    let listing = String::from_utf8(all.stdout).unwrap();
    assert_clean(&listing, "status");
    let rows = listing.lines().filter(|l| l.starts_with("ml ")).count();
    assert_eq!(rows, 1, "{listing}");
}

fn run(store: &Store, args: &[&str]) -> Output {
    store.dlock().args(args).output().unwrap()
}

/// The lines of a run's stderr, each checked to be one whole message of dlock's.
fn stderr_lines(out: &Output) -> Vec<String> {
    let text = String::from_utf8(out.stderr.clone()).expect("UTF-8 stderr");
    assert_clean(&text, "stderr");
    let lines: Vec<String> = text.lines().map(String::from).collect();
    for line in &lines {
        assert!(line.starts_with("dlock: "), "a line not of its own: {text}");
    }
    lines
}

/// No character that acts on a terminal but the newline ending each line.
pub fn assert_clean(text: &str, what: &str) {
    assert!(text.is_empty() || text.ends_with('\n'), "{what}: {text:?}");
    let bad = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}')
    };
    assert!(!text.chars().any(bad), "{what}: {text:?}");
}
