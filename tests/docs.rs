//! The manual cannot rot: every fenced `console` block of `README.md` and `docs/` runs
//! against the built binary on a fresh local store, every relative link and `#anchor`
//! between those pages resolves, and every store page has the same headings in the same
//! order.
//!
//! A `console` block is a session: `$ COMMAND` lines (run by `sh`, stdout and stderr
//! merged), each followed by its expected output. In that output `[..]` stands for any
//! text within one line, a line `...` for any number of lines, and a last line `? N` for
//! the exit code N (0 when there is none), as `trycmd` writes them. Examples that need a
//! server are fenced as `text` instead, and are not run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::dlock_bin;

/// The pages of the manual: the README and every `.md` file under `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/ is readable") {
            let path = entry.expect("a docs/ entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One fenced block: its info string, its first line's number, and its lines.
struct Block {
    info: String,
    line: usize,
    lines: Vec<String>,
}

/// The fenced blocks of a page, and its lines outside them (with their numbers).
fn split(text: &str) -> (Vec<Block>, Vec<(usize, String)>) {
    let (mut blocks, mut prose) = (Vec::new(), Vec::new());
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => {
                let info = line.trim_start().trim_start_matches('`').trim().to_string();
                open = Some(Block {
                    info,
                    line: i + 1,
                    lines: Vec::new(),
                });
            }
            (Some(_), true) => blocks.push(open.take().expect("an open block")),
            (Some(b), false) => b.lines.push(line.to_string()),
            (None, false) => prose.push((i + 1, line.to_string())),
        }
    }
    assert!(open.is_none(), "a fenced block is never closed");
    (blocks, prose)
}

/// One command of a session, with what it must print and its exit code.
struct Step {
    command: String,
    expected: Vec<String>,
    code: i32,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for line in &block.lines {
        if let Some(command) = line.strip_prefix("$ ") {
            out.push(Step {
                command: command.to_string(),
                expected: Vec::new(),
                code: 0,
            });
            continue;
        }
        let step = out
            .last_mut()
            .unwrap_or_else(|| panic!("line {}: a console block starts with `$ `", block.line));
        match line.strip_prefix("? ") {
            Some(code) => step.code = code.trim().parse().expect("`? N` is a number"),
            None => step.expected.push(line.trim_end().to_string()),
        }
    }
    out
}

/// Whether `line` matches `pattern`, where `[..]` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether `lines` match `patterns`, where a pattern `...` stands for any lines.
fn lines_match(patterns: &[String], lines: &[&str]) -> bool {
    match patterns.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p == "..." => {
            (0..=lines.len()).any(|skip| lines_match(rest, &lines[skip..]))
        }
        Some((p, rest)) => {
            !lines.is_empty() && line_matches(p, lines[0]) && lines_match(rest, &lines[1..])
        }
    }
}

/// Runs one command as a user would type it, in `dir`, with `dlock` first on the PATH and
/// the local store in `dir/store`.
fn run(step: &Step, dir: &Path) -> (String, i32) {
    let bin_dir = dlock_bin()
        .parent()
        .expect("the binary's folder")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("sh");
    c.arg("-c").arg(format!("exec 2>&1\n{}", step.command));
    for v in dlock::env::INHERITED {
        c.env_remove(v);
    }
    c.env("PATH", path)
        .env("DLOCK_DIR", dir.join("store"))
        .current_dir(dir);
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for sh") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("`{}` still runs after 30 s", step.command);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().expect("the command's output");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (text, status.code().unwrap_or(-1))
}

/// Runs every session of one page; the failures, one line each.
fn run_page(page: &Path) -> Vec<String> {
    let (blocks, _) = split(&read(page));
    let mut failures = Vec::new();
    for block in blocks.iter().filter(|b| b.info == "console") {
        let dir = tempfile::tempdir().expect("a temporary folder");
        for step in steps(block) {
            let (out, code) = run(&step, dir.path());
            let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
            if code != step.code || !lines_match(&step.expected, &lines) {
                failures.push(format!(
                    "{}:{}: `{}` exited {code} (expected {}) and printed:\n{out}",
                    page.display(),
                    block.line,
                    step.command,
                    step.code
                ));
                break;
            }
        }
    }
    failures
}

#[test]
fn the_console_examples_run_as_written() {
    let mut ran = 0;
    let mut failures = Vec::new();
    for page in pages() {
        let (blocks, _) = split(&read(&page));
        ran += blocks.iter().filter(|b| b.info == "console").count();
        failures.extend(run_page(&page));
    }
    assert!(
        ran >= 5,
        "only {ran} console blocks found: is the fence still `console`?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, spaces,
/// `-` and `_` kept), spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The headings of a page (outside code blocks), with their level.
fn headings(text: &str) -> Vec<(usize, String)> {
    let (_, prose) = split(text);
    prose
        .iter()
        .filter_map(|(_, l)| {
            let level = l.chars().take_while(|c| *c == '#').count();
            let title = l.get(level..)?.strip_prefix(' ')?;
            (level > 0).then(|| (level, title.to_string()))
        })
        .collect()
}

/// Every anchor of a page, with GitHub's `-1`, `-2` for repeated headings.
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, h) in headings(text) {
        let base = anchor(&h);
        let seen = out.iter().filter(|a| **a == base).count();
        let mut name = base.clone();
        let mut n = seen;
        while out.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        out.push(name);
    }
    out
}

/// The targets of the inline links `[text](target)` in one line, outside code spans.
fn links(line: &str) -> Vec<String> {
    let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join("``");
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// Why `target`, linked from `page`, does not resolve; `None` when it does.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
    let file = match path {
        "" => page.to_path_buf(),
        p => page.parent().expect("a page's folder").join(p),
    };
    if !file.exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    if fragment.is_empty() || file.is_dir() {
        return None;
    }
    let known = anchors(&read(&file));
    (!known.iter().any(|a| a == fragment)).then(|| format!("no heading #{fragment}"))
}

#[test]
fn every_link_between_the_pages_resolves() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let (_, prose) = split(&read(&page));
        for (n, line) in prose {
            for target in links(&line) {
                checked += 1;
                if let Some(why) = broken(&page, &target) {
                    failures.push(format!("{}:{n}: ({target}): {why}", page.display()));
                }
            }
        }
    }
    assert!(checked >= 50, "only {checked} links found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_store_page_has_the_same_headings_in_the_same_order() {
    let expected = [
        "URL forms",
        "What it guarantees and survives",
        "TTL rules",
        "Waiting and fairness",
        "Interop with the store's own tools",
        "What dlock writes in the store",
    ];
    let stores = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/stores");
    let mut seen = 0;
    for page in pages().iter().filter(|p| p.starts_with(&stores)) {
        seen += 1;
        let second: Vec<String> = headings(&read(page))
            .into_iter()
            .filter(|(level, _)| *level == 2)
            .map(|(_, h)| h)
            .collect();
        assert_eq!(second, expected, "{}", page.display());
    }
    assert_eq!(seen, 8, "one page per store under docs/stores");
}

#[test]
fn the_matching_rules_do_what_the_module_says() {
    assert!(line_matches(
        "held by [..] on file://[..]",
        "held by 3f9c (vm) on file:///t"
    ));
    assert!(!line_matches("held by [..]!", "held by x"));
    assert!(line_matches("token 1", "token 1"));
    assert!(!line_matches("token 1", "token 12"));
    let pats = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(
        &pats(&["a", "...", "d"]),
        &["a", "b", "c", "d"]
    ));
    assert!(!lines_match(&pats(&["a", "d"]), &["a", "b", "d"]));
    assert_eq!(
        anchor("`lock`, `unlock`, `renew` for scripts"),
        "lock-unlock-renew-for-scripts"
    );
    assert_eq!(
        anchor("Interop with the store's own tools"),
        "interop-with-the-stores-own-tools"
    );
    assert_eq!(
        anchors("# A\n## A\n```\n# not\n```\n## A"),
        ["a", "a-1", "a-2"]
    );
}
