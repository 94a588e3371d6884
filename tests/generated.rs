//! The checked-in completions and man pages must match the clap definition.
//!
//! After changing the CLI: `DLOCK_BLESS=1 cargo test --test integration generated::` rewrites them.

use std::path::Path;

#[test]
fn completions_and_man_pages_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("DLOCK_BLESS").is_some() {
        dlock::generate::write_all(root).expect("write generated files");
    }
    let stale = dlock::generate::stale(root);
    assert!(
        stale.is_empty(),
        "stale generated files {stale:?}: run `DLOCK_BLESS=1 cargo test --test integration generated::` and commit them"
    );
}

#[test]
fn every_subcommand_has_a_man_page() {
    let files: Vec<String> = dlock::generate::all_files()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for sub in [
        "exec",
        "lock",
        "unlock",
        "renew",
        "status",
        "wait",
        "completions",
    ] {
        assert!(
            files.contains(&format!("man/dlock-{sub}.1")),
            "no man page for {sub}"
        );
    }
    assert!(files.contains(&"man/dlock.1".to_string()));
}

#[test]
fn completions_command_prints_the_checked_in_script() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let checked_in =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("completions/dlock.bash"))
            .unwrap();
    assert_eq!(out.stdout, checked_in);
}

/// Each subcommand's one-line summary, as `dlock --help` lists it and as its own help
/// starts.
const SUMMARIES: [(&str, &str); 7] = [
    ("exec", "Run CMD while holding KEY"),
    (
        "lock",
        "Acquire KEY and leave it held until `unlock` or the TTL ends",
    ),
    ("unlock", "Release KEY"),
    ("renew", "Extend a held lease"),
    (
        "status",
        "Show who holds what (every held lock when no key is given)",
    ),
    ("wait", "Block until KEY is free, without taking it"),
    ("completions", "Print a shell completion script"),
];

fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "dlock {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_lists_every_subcommand_with_its_summary() {
    for flag in ["--help", "-h"] {
        let text = help(&[flag]);
        for (name, summary) in SUMMARIES {
            let line = text
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("dlock {flag} does not list {name}:\n{text}"));
            let listed = line.trim_start().strip_prefix(name).unwrap().trim();
            assert_eq!(listed, summary, "dlock {flag}, {name}:\n{text}");
        }
    }
}

#[test]
fn each_subcommand_help_starts_with_its_summary() {
    for (name, summary) in SUMMARIES {
        for flag in ["--help", "-h"] {
            let text = help(&[name, flag]);
            let first = text.lines().next().unwrap_or_default();
            assert_eq!(
                first.trim_end_matches('.'),
                summary,
                "dlock {name} {flag}:\n{text}"
            );
        }
    }
}
