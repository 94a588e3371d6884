//! The child: spawned in its own process group, signals forwarded to that group, killed
//! when the lease is in danger, and its end mapped to an exit code.
//!
//! Signals are not caught with handlers: [`Signals::catch`] blocks the forwarded ones and
//! SIGCHLD and reads them from a `signalfd`, which also tells when the child ended. That is
//! three system calls where tokio's signal and process drivers cost a socket pair, a
//! handler per signal, a pidfd and a set-up on every run that is a large share of a
//! `dlock exec` (figures: benches/RESULTS.md). The child starts with an empty signal mask
//! ([`crate::spawn`] clears it), and threads started later inherit the blocked set, so no
//! signal is ever delivered to a thread that would let it kill dlock.
//!
//! The child must never outlive a dead dlock unprotected: it gets `PR_SET_PDEATHSIG`
//! (SIGKILL) before `exec`, in [`crate::spawn`], the crate's one module with `unsafe` code.
//!
//! The parent-death signal fires when the *thread* that started the child exits, so
//! [`spawn`] must be called from a thread that lives as long as dlock: the main thread,
//! which is where the current-thread runtime of [`crate::cmd`] runs.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;

use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;

use crate::error::Error;
use crate::exit;
use crate::spawn::Process;

/// A spawned child and its process group.
pub struct Supervised {
    pub child: Process,
    pub pgid: Pid,
}

/// Why a command could not be started, with the shell's exit code for it.
#[derive(Debug)]
pub struct SpawnError {
    pub code: u8,
    pub message: String,
}

/// Spawns `argv` with extra `env`, in a new process group, with a parent-death signal.
pub fn spawn(argv: &[String], env: &[(&str, String)]) -> Result<Supervised, SpawnError> {
    let program = argv.first().ok_or_else(|| SpawnError {
        code: exit::USAGE,
        message: "no command given".into(),
    })?;
    let child = crate::spawn::spawn(argv, env).map_err(|e| spawn_error(program, &e))?;
    let pgid = Pid::from_raw(child.id() as i32);
    Ok(Supervised { child, pgid })
}

fn spawn_error(program: &str, e: &io::Error) -> SpawnError {
    let code = match e.kind() {
        io::ErrorKind::NotFound => exit::COMMAND_NOT_FOUND,
        _ => exit::CANNOT_EXECUTE,
    };
    let what = match code {
        exit::COMMAND_NOT_FOUND => "command not found".to_string(),
        _ => format!("cannot execute: {e}"),
    };
    SpawnError {
        code,
        message: format!("{program}: {what}"),
    }
}

/// The exit code for a finished child: its own code, or 128+N when killed by signal N.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signo)) => exit::for_signal(signo),
        (None, None) => exit::INTERNAL,
    }
}

/// While alive, the child's process group owns the terminal (so an interactive command can
/// read it, and Ctrl-C reaches it directly, as under a shell); dropping hands it back.
pub struct Foreground {
    ours: Pid,
}

impl Foreground {
    /// Gives the terminal on stdin to `pgid` if dlock is in the foreground of one; otherwise
    /// (cron, CI, pipes, background jobs) does nothing.
    pub fn give(pgid: Pid) -> Option<Foreground> {
        let stdin = std::io::stdin();
        let ours = nix::unistd::getpgrp();
        if nix::unistd::tcgetpgrp(&stdin).ok()? != ours {
            return None;
        }
        with_sigttou_blocked(|| nix::unistd::tcsetpgrp(&stdin, pgid)).ok()?;
        // The child may have touched the terminal before it was its own, and stopped.
        signal_group(pgid, Signal::SIGCONT);
        Some(Foreground { ours })
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        let _ = with_sigttou_blocked(|| nix::unistd::tcsetpgrp(std::io::stdin(), self.ours));
    }
}

/// Runs `f` with SIGTTOU blocked: a background process group may then take the terminal.
fn with_sigttou_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    crate::spawn::with_signals_blocked(&set, f)
}

/// Sends `sig` to the whole process group; a group that is already gone is fine.
pub fn signal_group(pgid: Pid, sig: Signal) {
    let _ = killpg(pgid, sig);
}

/// The signals dlock forwards to the child (and that cancel a wait), and the child's end.
pub struct Signals {
    fd: AsyncFd<SignalFd>,
}

/// What [`Signals::next`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caught {
    /// A signal to forward (or to cancel a wait with).
    Forward(Signal),
    /// SIGCHLD: the child may have ended.
    Child,
}

/// Signals forwarded to the child, as the contract lists them.
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

impl Signals {
    /// Starts catching the forwarded signals and SIGCHLD (from now on they no longer kill
    /// dlock). Call it before any other thread starts: they inherit the blocked set.
    pub fn catch() -> Result<Signals, Error> {
        let fail =
            |e: &dyn std::fmt::Display| Error::Internal(format!("cannot catch signals: {e}"));
        let mut set = SigSet::empty();
        for s in FORWARDED.into_iter().chain([Signal::SIGCHLD]) {
            set.add(s);
        }
        set.thread_block().map_err(|e| fail(&e))?;
        // A SIGCHLD left ignored by whoever started dlock (SIG_IGN) makes the kernel reap
        // CMD itself and send no SIGCHLD at all: dlock would wait forever, holding the lock.
        // Any handler lifts that; this one never runs (SIGCHLD stays blocked and is read
        // from the signalfd), and CMD starts with the default again (exec resets handlers).
        static CHILD_HANDLER_RAN: AtomicBool = AtomicBool::new(false);
        signal_hook::flag::register(libc::SIGCHLD, &CHILD_HANDLER_RAN).map_err(|e| fail(&e))?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(|e| fail(&e))?;
        // Deprecated because a type may hand tokio a raw fd that it does not own and closes
        // while registered. Not here: the SignalFd owns its fd, and the AsyncFd owns the
        // SignalFd, deregistering it before it is closed. (`register`, the replacement,
        // is `unsafe` for that same promise.)
        #[allow(deprecated)]
        let fd = AsyncFd::new(fd).map_err(|e| fail(&e))?;
        Ok(Signals { fd })
    }

    /// The next forwarded signal; SIGCHLD is skipped. Cancel-safe.
    pub async fn recv(&mut self) -> Signal {
        loop {
            if let Caught::Forward(sig) = self.next().await {
                return sig;
            }
        }
    }

    /// The next signal caught. Cancel-safe: a signal is read only when it is returned.
    pub async fn next(&mut self) -> Caught {
        loop {
            let Ok(mut ready) = self.fd.readable_mut().await else {
                // Only when the runtime shuts down, and then nobody is listening.
                return std::future::pending().await;
            };
            match ready.get_inner_mut().read_signal() {
                Ok(Some(info)) => match Signal::try_from(info.ssi_signo as i32) {
                    Ok(Signal::SIGCHLD) => return Caught::Child,
                    Ok(sig) => return Caught::Forward(sig),
                    Err(_) => {}
                },
                // Drained (or a read error, which a signalfd only gives for a short buffer).
                Ok(None) | Err(_) => ready.clear_ready(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGINT)), 130);
    }
}
