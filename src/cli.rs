//! The command line, defined once with clap's derive API.
//!
//! This definition is the single source of `--help`, `dlock completions SHELL`, and the
//! checked-in files in `completions/` and `man/` (see [`crate::generate`]).

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::parse_duration;
use crate::error::Error;
use crate::events::LogFormat;

mod acquire;
mod elect;
pub use self::acquire::{AcquireOpts, IfUnavailable, SharingOpts};
pub use self::elect::{ElectArgs, LeaderArgs};

pub(crate) const EXIT_CODES: &str = "\
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

/// Distributed locks for cron jobs and CI pipelines.
///
/// Run a command while holding a lease on KEY, so that it never runs twice at once, on one
/// host (embedded local store, the default) or across machines on Redis (one server,
/// Sentinel, Cluster, or Redlock over several), etcd, ZooKeeper, PostgreSQL, MySQL or
/// Memcached.
#[derive(Debug, Parser)]
#[command(name = "dlock", version, long_version = long_version(), about, long_about, after_long_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// `dlock --version`: the version and the stores this dlock was built with (`-V`: the
/// version alone).
fn long_version() -> String {
    let stores = crate::backend::registry::built_stores().join(", ");
    format!("{} (stores: {stores})", env!("CARGO_PKG_VERSION"))
}

/// The short `--url` help (`-h`): one line per scheme of [`crate::backend::registry`].
fn url_summary() -> String {
    format!(
        "Backend URL (none: the local store; several: a quorum; full forms: --help):\n{}",
        crate::backend::registry::url_summary()
    )
}

/// The long `--url` help (`--help`): every scheme's full forms, then how URLs combine.
fn url_help() -> String {
    format!(
        "Backend URL: {}. Repeat it (or separate with commas) for a majority quorum of \
         independent servers (3 or 5): Redlock over Redis servers, or memcached servers \
         (Redlock's rules; it survives the loss of a minority). Without any, the embedded local store in \
         $DLOCK_DIR or /var/tmp/dlock; an empty URL, or a DLOCK_URL set but empty, is an \
         error (exit 2), never the local store. `postgres://…?lock=advisory`: KEY is the \
         application's PostgreSQL advisory lock (a decimal bigint, `A,B`, or any other KEY as \
         hashtextextended(KEY, 0)), held by dlock's own session for `exec` only. Password: in the URL or REDISCLI_AUTH; TLS: \
         DLOCK_TLS_CA, DLOCK_TLS_CERT and DLOCK_TLS_KEY name PEM files.",
        crate::backend::registry::url_help()
    )
}

/// The global options, given before the subcommand name (`dlock -q exec …`).
#[derive(Debug, Args)]
pub struct GlobalArgs {
    // The help is built from the scheme table, so that it lists exactly what opens.
    #[arg(
        short = 'u',
        long = "url",
        env = crate::env::URL,
        value_delimiter = ',',
        hide_env_values = true,
        value_name = "URL",
        help = url_summary(),
        long_help = url_help()
    )]
    pub urls: Vec<String>,

    #[command(flatten)]
    pub output: Output,
}

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

/// The global options wherever they were given: what the commands read.
#[derive(Debug, Default)]
pub struct Global {
    pub urls: Vec<String>,
    pub json: bool,
    pub quiet: bool,
    pub verbose: u8,
    pub log_format: LogFormat,
}

impl Cli {
    /// The global options, merged from both places (a `--url` after the subcommand name
    /// wins), and the subcommand.
    pub fn resolve(self) -> Result<(Global, Command), Error> {
        let mut command = self.command;
        let late = std::mem::take(command.late());
        let (before, after) = (self.global.output, late.output);
        let g = Global {
            urls: if late.urls.is_empty() {
                self.global.urls
            } else {
                late.urls
            },
            json: before.json || after.json,
            quiet: before.quiet || after.quiet,
            verbose: before.verbose.saturating_add(after.verbose),
            log_format: after
                .log_format
                .or(before.log_format)
                .unwrap_or(LogFormat::Text),
        };
        if g.quiet && g.verbose > 0 {
            return Err(Error::Usage("--quiet cannot be used with --verbose".into()));
        }
        Ok((g, command))
    }
}

/// The subcommands. Each one's arguments are built only when it is the one invoked
/// (`defer`): building all of them would be a large part of dlock's start-up.
///
/// A subcommand's help text is the doc comment of its variant, which is built at once: on
/// its arguments' struct it would be built with the deferred part, so `dlock --help` would
/// list the subcommand without its summary.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Run CMD while holding KEY.
    ///
    /// Acquires KEY (waiting as told), runs CMD with DLOCK_KEY, DLOCK_OWNER and
    /// DLOCK_FENCING_TOKEN in its environment, renews the lease in the background, forwards
    /// signals, and releases KEY when CMD ends (with --hold-at-least, leaves it held until
    /// then), exiting with CMD's code. If the lease cannot be
    /// renewed, CMD's process group gets SIGTERM, then SIGKILL, before the lease can expire, and
    /// dlock exits 79. Inside CMD, a nested `dlock exec KEY` re-enters instead of deadlocking.
    Exec(ExecArgs),

    /// Acquire KEY and leave it held until `unlock` or the TTL ends.
    ///
    /// Prints the owner id alone on stdout (pass it to `unlock`/`renew` with --owner or
    /// DLOCK_OWNER); --json prints key, owner, fencing_token, ttl_ms and expires_at; --export
    /// prints shell assignments for `eval`.
    Lock(LockArgs),

    /// Release KEY.
    Unlock(UnlockArgs),

    /// Extend a held lease.
    Renew(RenewArgs),

    /// Show who holds what (every held lock when no key is given).
    ///
    /// Under each key, its waiters in queue order, each with the sharing it asks for when
    /// not exclusive (`(--shared)`, `(--limit 4)`). For each named key, also how its last `exec` run ended (`last run: ok (exit 0) 4m
    /// ago on ci-2, ran 12.3s`) and, when that run failed, the last success. Exits 0 when
    /// every named key is held, 1 when one is free; with --shared or --limit N, 0 when a
    /// caller with those options would have to wait for every named key (or would be
    /// refused), 1 when one has room for it.
    Status(StatusArgs),

    /// Block until KEY is free, without taking it.
    ///
    /// For scripts that must not start while a deploy (or any holder of KEY) runs. Exits 0
    /// as soon as KEY is free (at once when it is), 75 when --timeout elapses first. Woken by
    /// the backend's own notification of a release where it has one (local store, Redis,
    /// etcd); Redlock looks again every 200 ms. A lease that expires is noticed when it
    /// expires. A signal ends the wait (128+N).
    Wait(WaitArgs),

    /// Run CMD while this process leads NAME (hot standby on N hosts).
    ///
    /// Campaigns for NAME (waits in line as exec does, with the same options and exit
    /// codes), runs CMD once elected with DLOCK_FENCING_TOKEN (the term, strictly increasing
    /// across leaders), DLOCK_KEY, DLOCK_OWNER and DLOCK_LEADER_VALUE, and proclaims --value.
    /// Leadership lost: CMD's group is killed before the lease can expire, then exit 79, or
    /// with --rejoin back in line. CMD exits: leadership passes to the next candidate at once
    /// and dlock exits with CMD's code. SIGTERM goes to CMD; leadership passes when it is
    /// gone. Takeover: at once after a clean exit (a hand-off; where waiters poll, at their
    /// next look); after the leader's dlock is killed or its host cut off, once its lease
    /// expires: at most the TTL plus the renewal margin (on the local store, a dead dlock
    /// frees it at once). See docs/election.md.
    Elect(ElectArgs),

    /// Show who leads NAME: value, host, pid, term (token) and for how long.
    ///
    /// Exits 0 when someone leads, 3 when nobody does. --watch prints one line per change
    /// of leader (woken by the store's notification where it has one); --here exits 0
    /// when this host leads, 3 when not.
    Leader(LeaderArgs),

    /// Print a shell completion script.
    Completions(CompletionsArgs),
}

impl Command {
    /// The global options given after this subcommand's name.
    fn late(&mut self) -> &mut Late {
        match self {
            Command::Exec(a) => &mut a.late,
            Command::Lock(a) => &mut a.late,
            Command::Unlock(a) => &mut a.late,
            Command::Renew(a) => &mut a.late,
            Command::Status(a) => &mut a.late,
            Command::Wait(a) => &mut a.late,
            Command::Elect(a) => &mut a.late,
            Command::Leader(a) => &mut a.late,
            Command::Completions(a) => &mut a.late,
        }
    }
}

// The arguments of `dlock exec`; its help text is on [`Command::Exec`].
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct ExecArgs {
    /// The lock key.
    pub key: String,

    #[command(flatten)]
    pub acquire: AcquireOpts,

    /// Run STRING with `sh -c` instead of CMD, as flock(1) does.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "cmd"
    )]
    pub shell: Option<String>,

    /// Terminate CMD's process group (SIGTERM) once it has run DUR, release the lock, and
    /// exit 124, as timeout(1) does.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub max_runtime: Option<Duration>,

    /// Write node_exporter textfile metrics for KEY to PATH when the run ends (last start,
    /// end and success times, duration, wait, exit code, lease lost); with
    /// $DLOCK_METRICS_DIR, one file per key there.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,

    /// Keep KEY held until DUR after it was acquired, even when CMD ends sooner: the lease
    /// is left to expire by itself (on every backend, the local store too) and dlock exits
    /// with CMD's status at once. Stops a short job from running again on a host whose
    /// clock or cron fires a little later. Only the outermost exec holds on; a run cut short
    /// by --max-runtime holds on too (exit 124); a lost lease (79) holds nothing.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub hold_at_least: Option<Duration>,

    /// With --max-runtime: SIGKILL the group this long after the SIGTERM.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s", requires = "max_runtime")]
    pub kill_after: Duration,

    /// The command to run, after `--`.
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

impl ExecArgs {
    /// The argv to run: CMD, or `sh -c STRING`.
    pub fn argv(&self) -> Vec<String> {
        match &self.shell {
            Some(s) => vec!["sh".into(), "-c".into(), s.clone()],
            None => self.command.clone(),
        }
    }
}

// The arguments of `dlock lock`; its help text is on [`Command::Lock`].
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct LockArgs {
    /// The lock key.
    pub key: String,

    #[command(flatten)]
    pub acquire: AcquireOpts,

    /// Print `export DLOCK_KEY=… DLOCK_OWNER=… DLOCK_FENCING_TOKEN=…` for `eval`
    /// (--json wins when both are given).
    #[arg(long)]
    pub export: bool,

    #[command(flatten)]
    pub late: Late,
}

// The arguments of `dlock unlock`; its help text is on [`Command::Unlock`].
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct UnlockArgs {
    /// The lock key.
    pub key: String,

    /// The owner id printed by `lock` (default: $DLOCK_OWNER).
    #[arg(long, env = crate::env::OWNER, hide_env_values = true, value_name = "ID")]
    pub owner: Option<String>,

    /// Release whoever holds it (says so on stderr).
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub late: Late,
}

// The arguments of `dlock renew`; its help text is on [`Command::Renew`].
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct RenewArgs {
    /// The lock key.
    pub key: String,

    /// The owner id printed by `lock` (default: $DLOCK_OWNER).
    #[arg(long, env = crate::env::OWNER, hide_env_values = true, value_name = "ID")]
    pub owner: Option<String>,

    /// New lease length, from now. An etcd lease keeps the TTL it was granted with: a
    /// longer one is refused.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,

    #[command(flatten)]
    pub late: Late,
}

// The arguments of `dlock status`; its help text is on [`Command::Status`].
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct StatusArgs {
    /// Keys to show; none shows every held lock.
    pub keys: Vec<String>,

    /// Keep showing the keys, redrawn in place on a terminal whenever they change (and at
    /// least every second); elsewhere, a new snapshot each time something changes. Ends
    /// on Ctrl-C (SIGINT), SIGTERM or SIGHUP, with exit 0.
    #[arg(long)]
    pub watch: bool,

    /// For the exit code: whether a caller with these options could take each key now
    /// (1 when one has room for it), rather than whether it is held.
    #[command(flatten)]
    pub sharing: SharingOpts,

    #[command(flatten)]
    pub late: Late,
}

// The arguments of `dlock wait`; its help text is on [`Command::Wait`].
#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct WaitArgs {
    /// The lock key.
    pub key: String,

    /// Give up after DUR (exit 75). Default: wait forever.
    #[arg(short = 'w', long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// Wait until a caller with these options could take KEY: with --shared, until no
    /// exclusive holder is left; with --limit N, until fewer than N hold it.
    #[command(flatten)]
    pub sharing: SharingOpts,

    #[command(flatten)]
    pub late: Late,
}

// The arguments of `dlock completions`; its help text is on [`Command::Completions`].
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    pub shell: Shell,

    #[command(flatten)]
    pub late: Late,
}

/// Shells we generate completions for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

impl Shell {
    /// Every shell, for generating the checked-in files.
    pub const ALL: [Shell; 5] = [
        Shell::Bash,
        Shell::Zsh,
        Shell::Fish,
        Shell::Elvish,
        Shell::Powershell,
    ];
}

/// The clap command, for generators.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn exec_takes_the_command_after_dashes() {
        let cli =
            Cli::try_parse_from(["dlock", "exec", "k", "--ttl", "5", "--", "echo", "-n", "hi"])
                .unwrap();
        let Command::Exec(e) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(e.command, ["echo", "-n", "hi"]);
        assert_eq!(e.acquire.ttl, Duration::from_secs(5));
    }

    #[test]
    fn global_options_may_follow_the_subcommand() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).unwrap().resolve();
        let (g, _) = parse(&[
            "dlock",
            "--json",
            "exec",
            "-q",
            "-u",
            "redis://a",
            "k",
            "--",
            "true",
        ])
        .unwrap();
        assert!(g.json && g.quiet);
        assert_eq!(g.urls, ["redis://a"]);
        let (g, _) = parse(&[
            "dlock",
            "-u",
            "redis://a",
            "status",
            "--url",
            "redis://b,redis://c",
        ])
        .unwrap();
        assert_eq!(g.urls, ["redis://b", "redis://c"], "the later --url wins");
        let (g, _) = parse(&["dlock", "-v", "status", "-v"]).unwrap();
        assert_eq!(g.verbose, 2);
        assert!(matches!(
            parse(&["dlock", "-q", "status", "-v"]),
            Err(Error::Usage(_))
        ));
    }

    #[test]
    fn nonblock_is_an_alias() {
        let cli = Cli::try_parse_from(["dlock", "lock", "k", "--nonblock"]).unwrap();
        let Command::Lock(l) = cli.command else {
            panic!("not lock")
        };
        assert!(l.acquire.no_wait);
    }
}
