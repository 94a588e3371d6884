//! Every exit code dlock can return, in one place (see the contract's table).
//!
//! Scripts branch on these numbers, so they never change meaning.

/// Success; `exec` passes the child's own code through instead.
pub const OK: u8 = 0;
/// `status`: a named key is free.
pub const FREE: u8 = 1;
/// `leader`: nobody leads the election (`--here`: this host does not lead it).
pub const NO_LEADER: u8 = 3;
/// Usage error or invalid value (bad duration, empty key, unknown option).
pub const USAGE: u8 = 2;
/// Backend unavailable: cannot connect, authentication refused, protocol error.
pub const UNAVAILABLE: u8 = 69;
/// Internal error (a bug, or a corrupt local state file).
pub const INTERNAL: u8 = 70;
/// Lock not obtained: held and `--no-wait`, or `--timeout` elapsed. `-E` overrides it.
pub const NOT_OBTAINED: u8 = 75;
/// `unlock`/`renew` refused: the caller is not the owner, or the lease is gone.
pub const NOT_OWNER: u8 = 77;
/// `exec`: the lease was lost while the command ran, and the command was terminated.
pub const LEASE_LOST: u8 = 79;
/// `exec`/`lock --supersede`: a newer `--supersede` waiter for the key took this one's
/// place in the queue; nothing was run and nothing is left queued.
pub const SUPERSEDED: u8 = 80;
/// `exec --max-runtime`: the command ran too long and was terminated (as timeout(1)).
pub const TIMED_OUT: u8 = 124;
/// The command was found but could not be executed (as sh does).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as sh does).
pub const COMMAND_NOT_FOUND: u8 = 127;
/// Base for "killed by signal N": the code is 128 + N.
pub const SIGNAL_BASE: u8 = 128;

/// Exit code for a process that ended by signal `signo` (128 + N, like every shell).
pub fn for_signal(signo: i32) -> u8 {
    (i32::from(SIGNAL_BASE) + signo).clamp(0, 255) as u8
}
