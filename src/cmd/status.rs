//! `dlock status [KEY...]`: who holds what, and for named keys how their last run went.

use crate::backend::{Backend, KeyStatus, LastRuns};
use crate::cli::{Global, StatusArgs};
use crate::config::check_key;
use crate::error::{Error, Result};
use crate::{exit, output};

/// Prints the state of the named keys (or every held lock); exit 1 when a named key is free.
/// Listing every lock goes on past keys that cannot be read: each gets a line on stderr,
/// and the exit code is then that of the first such error (70 for a damaged file), after
/// everything readable was printed.
pub async fn run(global: &Global, args: StatusArgs) -> Result<u8> {
    for key in &args.keys {
        check_key(key)?;
    }
    if args.watch {
        return super::watch::run(global, &args.keys).await;
    }
    let (_, backend) = super::open(global, None).await?;
    let (states, unreadable) = if args.keys.is_empty() {
        let listing = backend.list().await?;
        (listing.held, listing.unreadable)
    } else {
        (backend.status(&args.keys).await?, Vec::new())
    };
    let runs = last_runs(&*backend, &args.keys, !global.quiet).await;
    let backend_name = backend.describe();
    if global.json {
        for (i, s) in states.iter().enumerate() {
            let line = output::StatusJson::new(s, &backend_name);
            match runs.get(i) {
                Some(Some(r)) => output::print_json(&line.with_runs(r)),
                _ => output::print_json(&line),
            }
        }
    } else if !states.is_empty() || unreadable.is_empty() {
        for line in output::status_lines(&states, &runs, &backend_name) {
            let _ = output::write_line(&line);
        }
    }
    if let Some(code) = unreadable.first().map(Error::exit_code) {
        for e in &unreadable {
            eprintln!("dlock: {e}");
        }
        return Ok(code);
    }
    Ok(exit_code(&states))
}

/// 0 when every key shown is held, 1 when one is free.
pub fn exit_code(states: &[KeyStatus]) -> u8 {
    let all_held = states.iter().all(|s| s.lock.is_some());
    if all_held {
        exit::OK
    } else {
        exit::FREE
    }
}

/// The run records of the named keys, in order (none for a listing). A key whose records
/// cannot be read gets `None` and, when `warn`, a warning: they are not what `status`
/// is asked first, and must not hide who holds the lock.
pub async fn last_runs(
    backend: &dyn Backend,
    keys: &[String],
    warn: bool,
) -> Vec<Option<LastRuns>> {
    let mut all = Vec::with_capacity(keys.len());
    for key in keys {
        all.push(match backend.last_runs(key).await {
            Ok(r) => Some(r),
            Err(e) => {
                if warn {
                    eprintln!(
                        "dlock: warning: cannot read the last run of '{key}' on {}: {e}",
                        backend.describe()
                    );
                }
                None
            }
        });
    }
    all
}
