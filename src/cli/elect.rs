//! The arguments of `dlock elect` and `dlock leader`; their help texts are on
//! [`super::Command::Elect`] and [`super::Command::Leader`].

use std::path::PathBuf;

use clap::Args;

use super::acquire::AcquireOpts;
use super::options::{Late, EXIT_CODES};

// The arguments of `dlock elect`.
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct ElectArgs {
    /// The election's name (a lock key).
    pub name: String,

    #[command(flatten)]
    pub acquire: AcquireOpts,

    /// What the leader proclaims: shown by `dlock leader` and `status`, and given to CMD as
    /// DLOCK_LEADER_VALUE. Default: "HOST PID CMD", shortened.
    #[arg(long, value_name = "TEXT")]
    pub value: Option<String>,

    /// When leadership is lost (CMD terminated, exit 79 otherwise), go back in line and run
    /// CMD again once elected again, instead of exiting (a store still out of reach then is
    /// tried again every second). Each lost term is one `term_lost` event (-v) and counts in
    /// --metrics-file.
    #[arg(long)]
    pub rejoin: bool,

    /// Write node_exporter textfile metrics for NAME to PATH at the end of each term (as
    /// exec does), with dlock_elect_lost_terms_total.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    /// Run STRING with `sh -c` instead of CMD.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "cmd"
    )]
    pub shell: Option<String>,

    /// The command to run while leading, after `--`.
    #[arg(
        id = "cmd",
        required_unless_present = "shell",
        trailing_var_arg = true,
        value_name = "CMD",
        num_args = 1..
    )]
    pub command: Vec<String>,

    #[command(flatten)]
    pub late: Late,
}

impl ElectArgs {
    /// The argv to run: CMD, or `sh -c STRING`.
    pub fn argv(&self) -> Vec<String> {
        match &self.shell {
            Some(s) => vec!["sh".into(), "-c".into(), s.clone()],
            None => self.command.clone(),
        }
    }
}

// The arguments of `dlock leader`.
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct LeaderArgs {
    /// The election's name.
    pub name: String,

    /// Keep printing: one line (one JSON object with --json) each time the leader changes,
    /// `none` while nobody leads, until Ctrl-C (SIGINT), SIGTERM or SIGHUP (exit 0).
    #[arg(long, conflicts_with = "here")]
    pub watch: bool,

    /// Print nothing; exit 0 when a process on this host leads NAME, 3 when not (nobody
    /// leads, or another host does): `dlock leader sched --here && ./only-on-the-leader`.
    #[arg(long)]
    pub here: bool,

    #[command(flatten)]
    pub late: Late,
}
