//! node_exporter textfile metrics for one key, written at the end of each `exec`
//! (`--metrics-file PATH`, or `DLOCK_METRICS_DIR`): when the last run started and ended,
//! when it last succeeded, how long it ran and waited, its exit code, and whether the
//! lease was lost. The file is replaced atomically (written beside it, then swapped in), so
//! the collector never reads half of it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What one run of `exec` did.
#[derive(Debug, Clone)]
pub struct Run {
    pub key: String,
    /// Unix times in seconds.
    pub started: f64,
    pub ended: f64,
    pub waited_s: f64,
    /// The wait expected when it began (see [`crate::backend::estimate`]), when the key
    /// had a history and the run waited.
    pub expected_wait_s: Option<f64>,
    pub ran_s: f64,
    pub exit_code: u8,
    pub lease_lost: bool,
    /// `elect`: how many terms this candidate has lost so far (a counter); `None` for
    /// `exec`, whose file has no such line.
    pub lost_terms: Option<u64>,
}

/// Where the metrics of `key` go: `explicit`, or `DLOCK_METRICS_DIR/dlock_<key>.prom`.
pub fn path_for(explicit: Option<&Path>, key: &str) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let dir = std::env::var_os(crate::env::METRICS_DIR).filter(|d| !d.is_empty())?;
    let safe: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Some(PathBuf::from(dir).join(format!("dlock_{safe}.prom")))
}

/// Writes `run` to `path`, keeping the last success of an earlier run when this one failed.
pub fn write(path: &Path, run: &Run) -> Result<()> {
    let previous = std::fs::read_to_string(path).unwrap_or_default();
    let last_success = if run.exit_code == 0 && !run.lease_lost {
        Some(run.ended)
    } else {
        last_success_in(&previous)
    };
    let text = render(run, last_success);
    let fail = |e: std::io::Error| {
        Error::Internal(format!("cannot write metrics file {}: {e}", path.display()))
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(fail)?;
    put_in_place(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}

/// Moves `tmp` to `path` atomically. An existing file is swapped out (`RENAME_EXCHANGE`)
/// rather than replaced: ext4 (`auto_da_alloc`, its default) writes a file's data to disk
/// before a rename that replaces another file, which stalls the end of every `exec` for as
/// long as the disk is busy; an exchange is as atomic for a reader and does not wait. The
/// old content, now at `tmp`, is then removed. Where the exchange is not possible (no file
/// yet, a file system without it), a plain rename.
fn put_in_place(tmp: &Path, path: &Path) -> std::io::Result<()> {
    use nix::fcntl::{renameat2, RenameFlags};
    match renameat2(None, tmp, None, path, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => {
            let _ = std::fs::remove_file(tmp);
            Ok(())
        }
        Err(_) => std::fs::rename(tmp, path),
    }
}

/// The metrics text of `run`.
pub fn render(run: &Run, last_success: Option<f64>) -> String {
    let label = format!("{{key=\"{}\"}}", escape(&run.key));
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP dlock_{name} {help}");
        let _ = writeln!(out, "# TYPE dlock_{name} gauge");
        let _ = writeln!(out, "dlock_{name}{label} {value}");
    };
    metric(
        "last_start_timestamp_seconds",
        "When the last run of the key's command started.",
        run.started,
    );
    metric(
        "last_end_timestamp_seconds",
        "When the last run of the key's command ended.",
        run.ended,
    );
    if let Some(t) = last_success {
        metric(
            "last_success_timestamp_seconds",
            "When a run of the key's command last ended with exit code 0.",
            t,
        );
    }
    metric(
        "last_duration_seconds",
        "How long the last run of the command took.",
        run.ran_s,
    );
    metric(
        "last_wait_seconds",
        "How long the last run waited for the lock.",
        run.waited_s,
    );
    if let Some(expected) = run.expected_wait_s {
        metric(
            "last_expected_wait_seconds",
            "The wait the last run expected when it began to wait (from the key's run history).",
            expected,
        );
    }
    metric(
        "last_exit_code",
        "The exit code of the last run (dlock's: 79 lease lost, 124 too long).",
        f64::from(run.exit_code),
    );
    metric(
        "last_lease_lost",
        "1 when the last run lost its lease and was terminated.",
        f64::from(u8::from(run.lease_lost)),
    );
    if let Some(n) = run.lost_terms {
        let _ = writeln!(
            out,
            "# HELP dlock_elect_lost_terms_total Terms this candidate lost (leadership lost while its command ran).\n\
             # TYPE dlock_elect_lost_terms_total counter\n\
             dlock_elect_lost_terms_total{label} {n}"
        );
    }
    out
}

/// The last-success value of a file this module wrote.
fn last_success_in(text: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with("dlock_last_success_timestamp_seconds{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(code: u8) -> Run {
        Run {
            key: "a\"b\\c\nd".into(),
            started: 100.0,
            ended: 112.5,
            waited_s: 0.25,
            expected_wait_s: None,
            ran_s: 12.25,
            exit_code: code,
            lease_lost: false,
            lost_terms: None,
        }
    }

    #[test]
    fn a_failed_run_keeps_the_last_success() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.prom");
        write(&path, &run(0)).unwrap();
        let mut failed = run(3);
        failed.ended = 200.0;
        write(&path, &failed).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("dlock_last_success_timestamp_seconds{key=\"a\\\"b\\\\c\\nd\"} 112.5"),
            "{text}"
        );
        assert!(
            text.contains("dlock_last_exit_code{key=\"a\\\"b\\\\c\\nd\"} 3"),
            "{text}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "a temporary file was left"
        );
    }

    #[test]
    fn the_directory_form_names_a_file_per_key() {
        assert_eq!(
            path_for(Some(Path::new("/x/y.prom")), "k"),
            Some(PathBuf::from("/x/y.prom"))
        );
    }
}
