//! Completion scripts and man pages, generated from the clap definition in [`crate::cli`].
//!
//! The generated files are checked in (`completions/`, `man/`) so that packagers need no
//! build step; `tests/generated.rs` compares them with what this module produces and fails
//! when they are stale (`DLOCK_BLESS=1 cargo test --test integration generated::` rewrites them).

use std::path::Path;

use clap_complete::Shell as Gen;

use crate::cli::{command, Shell};

/// The completion script for `shell`.
pub fn completion(shell: Shell) -> Vec<u8> {
    let gen = match shell {
        Shell::Bash => Gen::Bash,
        Shell::Zsh => Gen::Zsh,
        Shell::Fish => Gen::Fish,
        Shell::Elvish => Gen::Elvish,
        Shell::Powershell => Gen::PowerShell,
    };
    let mut out = Vec::new();
    let mut cmd = command();
    cmd.build(); // subcommands are deferred (see `cli::Command`): complete them first
    clap_complete::generate(gen, &mut cmd, "dlock", &mut out);
    out
}

/// The file name a completion script is installed under.
pub fn completion_file(shell: Shell) -> &'static str {
    match shell {
        Shell::Bash => "dlock.bash",
        Shell::Zsh => "_dlock",
        Shell::Fish => "dlock.fish",
        Shell::Elvish => "dlock.elv",
        Shell::Powershell => "_dlock.ps1",
    }
}

/// Every generated file, as (path relative to the repository root, contents).
pub fn all_files() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = Shell::ALL
        .iter()
        .map(|&s| (format!("completions/{}", completion_file(s)), completion(s)))
        .collect();
    let mut root = command();
    root.build(); // completes every subcommand (help, version) before its page is cut out
    files.push(("man/dlock.1".into(), render_man(root.clone())));
    for sub in root.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("dlock-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .version(root.get_version().unwrap_or_default().to_string());
        files.push((format!("man/{name}.1"), render_man(page)));
    }
    files
}

fn render_man(cmd: clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    // The version alone: the pages are the same whichever stores a build has.
    clap_mangen::Man::new(cmd.long_version(None))
        .render(&mut out)
        .expect("rendering a man page into memory cannot fail");
    out
}

/// Writes every generated file under `root`.
pub fn write_all(root: &Path) -> std::io::Result<()> {
    for (rel, body) in all_files() {
        let path = root.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, body)?;
    }
    Ok(())
}

/// The generated files under `root` that are missing or differ from what the code makes.
pub fn stale(root: &Path) -> Vec<String> {
    all_files()
        .into_iter()
        .filter(|(rel, body)| std::fs::read(root.join(rel)).ok().as_ref() != Some(body))
        .map(|(rel, _)| rel)
        .collect()
}
