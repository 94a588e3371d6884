//! One file per subcommand; [`run`] dispatches.
//!
//! Everything runs on a current-thread tokio runtime on the main thread: it starts in
//! microseconds (what `exec` overhead is made of), and the child must be forked from a
//! thread that lives as long as dlock (see [`crate::supervisor`]).

pub(crate) mod acquire;
mod common;
mod completions;
mod elect;
mod exec;
mod hold;
mod leader;
mod lock;
mod record;
mod renew;
mod status;
mod unlock;
mod wait;
mod watch;

use crate::cli::{Cli, Command, Global};
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
        Command::Elect(args) => elect::run(&global, args).await,
        Command::Leader(args) => leader::run(&global, args).await,
        Command::Completions(args) => completions::run(&args),
    }
}
