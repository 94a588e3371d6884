//! One file per subcommand; [`run`] dispatches.

use crate::cli::{Cli, Command};
use crate::error::Result;

/// Runs the parsed command line and returns the exit code.
pub fn run(cli: Cli) -> Result<u8> {
    let _ = cli;
    let _ = Command::Completions;
    Ok(0)
}
