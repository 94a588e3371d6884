//! `dlock completions SHELL`: print a completion script.

use std::io::Write;

use crate::cli::CompletionsArgs;
use crate::error::{Error, Result};
use crate::{exit, generate};

/// Prints the completion script for the requested shell on stdout.
pub fn run(args: &CompletionsArgs) -> Result<u8> {
    std::io::stdout()
        .write_all(&generate::completion(args.shell))
        .map_err(|e| Error::Internal(format!("cannot write the completion script: {e}")))?;
    Ok(exit::OK)
}
