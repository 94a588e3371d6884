//! What every subcommand shares: the global options in their place after the subcommand
//! name ([`Late`]), what dlock says ([`Output`]), and the exit codes every `--help` ends
//! with. A file of its own so that `cli.rs` and `cli/elect.rs` both import it.

use clap::Args;

use crate::events::LogFormat;

pub const EXIT_CODES: &str = "\
Exit codes:
  0        success (exec: the command's own code is passed through)
  1        status: a named key is free
  2        usage error or invalid value
  3        leader: nobody leads NAME (--here: this host does not lead it)
  69       backend unavailable: not reachable for the whole time allowed (--timeout, at
           least 2s; 30s without it), or authentication refused
  70       internal error
  75       lock not obtained (held with --no-wait, or --timeout elapsed); see -E
  77       unlock/renew refused: not the owner, or the lease is gone
  79       exec: the lease was lost while the command ran; it was terminated
  124      exec --max-runtime: the command ran too long and was terminated
  126/127  the command is not executable / not found
  128+N    the command was killed by signal N";

// The global options once more, for their place after the subcommand name (`dlock exec
// -q KEY -- CMD`); `Cli::resolve` merges both places into `Global`.
//
// Every subcommand flattens this instead of clap's `global = true`: propagating global
// options is a large part of clap's work on every run, and dlock's start-up is most of
// what an `exec` costs (figures: benches/RESULTS.md).
//
// Here and on `Output`, plain comments: clap takes a flattened struct's doc comment for the
// description of the command that flattens it, and would show this one in place of each
// subcommand's own.
#[derive(Debug, Default, Args)]
pub struct Late {
    /// Backend URL; $DLOCK_URL when not given (details: dlock --help).
    #[arg(short = 'u', long = "url", value_delimiter = ',', value_name = "URL")]
    pub urls: Vec<String>,

    #[command(flatten)]
    pub output: Output,
}

// What dlock says, and how much: the same options in both places (plain comment: see
// `Late`).
#[derive(Debug, Default, Args)]
pub struct Output {
    /// Machine-readable output on stdout (one JSON object, or one per line for lists).
    #[arg(long)]
    pub json: bool,

    /// Say less on stderr (no waiting line, no notes).
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Say more on stderr: one line per event (-v), renewals too (-vv).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// The events of -v as `text` lines or `json` objects, one per line on stderr (json
    /// shows them without -v).
    #[arg(long, value_name = "FORMAT", env = crate::env::LOG_FORMAT)]
    pub log_format: Option<LogFormat>,
}
