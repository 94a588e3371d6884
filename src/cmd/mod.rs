//! One file per subcommand; [`run`] dispatches.
//!
//! Everything runs on a current-thread tokio runtime on the main thread: it starts in
//! microseconds (what `exec` overhead is made of), and the child must be forked from a
//! thread that lives as long as dlock (see [`crate::supervisor`]).

pub(crate) mod acquire;
mod completions;
mod exec;
mod expect;
pub(crate) use expect::Expectation;
mod hold;
mod lock;
mod record;
mod renew;
mod status;
mod unlock;
mod wait;
mod watch;

use std::sync::Arc;

use crate::backend::BackendSpec;
use crate::backend::{self, Backend};
use crate::cli::{Cli, Command, Global};
use crate::config::check_key;
use crate::error::{Error, Result};

/// Runs the parsed command line and returns the exit code.
pub fn run(cli: Cli) -> Result<u8> {
    let started = std::time::Instant::now();
    let (mut global, command) = cli.resolve()?;
    crate::events::init(global.verbose, global.log_format, started);
    global.urls = crate::credentials::restore(global.urls);
    if let Command::Completions(args) = &command {
        return completions::run(args);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(dispatch(global, command))
}

async fn dispatch(global: Global, command: Command) -> Result<u8> {
    match command {
        Command::Exec(args) => exec::run(&global, args).await,
        Command::Lock(args) => lock::run(&global, args).await,
        Command::Unlock(args) => unlock::run(&global, args).await,
        Command::Renew(args) => renew::run(&global, args).await,
        Command::Status(args) => status::run(&global, args).await,
        Command::Wait(args) => wait::run(&global, args).await,
        Command::Completions(args) => completions::run(&args),
    }
}

/// Checks `key` and opens the backend the global options name.
async fn open(global: &Global, key: Option<&str>) -> Result<(BackendSpec, Arc<dyn Backend>)> {
    if let Some(key) = key {
        check_key(key)?;
    }
    let spec = BackendSpec::from_urls(&global.urls)?;
    let t0 = std::time::Instant::now();
    let backend = backend::open_exclusive(&spec)
        .await
        .map_err(|e| naming(key, e))?;
    let (d, ms) = (backend.describe(), t0.elapsed().as_millis() as u64);
    log::info!(target: "dlock", event = "connected", backend = d.as_str(), ms = ms; "connected to {d} in {ms}ms");
    Ok((spec, backend))
}

/// A store that cannot be reached is named by its own error; the key the command was for
/// is added, so that the one line says both.
fn naming(key: Option<&str>, e: Error) -> Error {
    match (key, e) {
        (Some(k), e @ (Error::Unavailable(_) | Error::Transient(_)))
            if !e.to_string().contains(&format!("'{k}'")) =>
        {
            e.map_message(|m| format!("lock '{k}': {m}"))
        }
        (_, e) => e,
    }
}

/// The owner id from `--owner`/`DLOCK_OWNER`, required by `renew` and `unlock`.
fn required_owner(owner: Option<String>, key: &str) -> Result<String> {
    match owner {
        Some(o) if !o.trim().is_empty() => Ok(o.trim().to_string()),
        _ => Err(Error::Usage(format!(
            "no owner for '{key}': pass --owner ID (printed by `dlock lock`) or set DLOCK_OWNER"
        ))),
    }
}
