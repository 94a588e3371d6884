//! The checked-in completions and man pages must match the clap definition.
//!
//! After changing the CLI: `DLOCK_BLESS=1 cargo test --test generated` rewrites them.

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
        "stale generated files {stale:?}: run `DLOCK_BLESS=1 cargo test --test generated` and commit them"
    );
}

#[test]
fn every_subcommand_has_a_man_page() {
    let files: Vec<String> = dlock::generate::all_files()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for sub in ["exec", "lock", "unlock", "renew", "status", "completions"] {
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
