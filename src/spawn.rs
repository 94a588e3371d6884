//! Starting CMD as `posix_spawn(3)` does, plus the one thing `posix_spawn` cannot do: the
//! parent-death signal.
//!
//! `std::process::Command` with a `pre_exec` hook (which the parent-death signal needs) has
//! to `fork`: the kernel copies dlock's page tables, and every page dlock writes afterwards
//! faults to be copied again: a large share of an `exec`'s CPU (figures:
//! benches/RESULTS.md). Here the child shares dlock's memory (`CLONE_VM`) and dlock is paused
//! until the child has called `exec` or exited (`CLONE_VFORK`), as glibc's `posix_spawn`
//! does; the child runs on a stack of its own and makes only system calls on data prepared
//! before the clone: `setpgid`, `signal` (SIGPIPE back to its default), `sigprocmask`,
//! `prctl(PR_SET_PDEATHSIG)`, `getppid`, then `execvpe`, which searches `PATH` and runs a
//! script without `#!` with `/bin/sh`, as `execvp` does.
//!
//! Every signal is blocked in dlock's thread across the clone, so no handler can run in the
//! child on dlock's memory before the child has set its own mask; the child's mask is then
//! emptied, which the command keeps (dlock blocks the signals it reads from a signalfd).
//! The child reports why `exec` failed through an atomic in dlock's memory, which dlock
//! reads once it resumes.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// The child's stack beyond what its arguments need: `execvpe` keeps on it each path it
/// tries (as long as `PATH` plus the name), and a copy of argv for a script without `#!`.
const STACK_SPARE: usize = 64 * 1024;

/// A started command, to be reaped with [`Process::try_wait`].
#[derive(Debug)]
pub struct Process {
    pid: Pid,
    status: Option<ExitStatus>,
}

impl Process {
    pub fn id(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// The command's status if it has ended (reaped once, then remembered).
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = match waitpid(self.pid, Some(WaitPidFlag::WNOHANG))? {
                WaitStatus::Exited(_, code) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
                WaitStatus::Signaled(_, sig, core) => Some(ExitStatus::from_raw(
                    sig as i32 | if core { 0x80 } else { 0 },
                )),
                _ => None,
            };
        }
        Ok(self.status)
    }
}

/// What the child reads: everything prepared by dlock before the clone.
struct ChildArgs<'a> {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    parent: libc::pid_t,
    errno: &'a AtomicI32,
}

/// Starts `argv` with dlock's environment plus `env`, in a process group of its own, with
/// SIGKILL as its parent-death signal. Call it from the thread that lives as long as dlock
/// (the signal fires when the thread that started the child ends).
pub fn spawn(argv: &[String], env: &[(&str, String)]) -> io::Result<Process> {
    let args = argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let program = args.first().ok_or(io::ErrorKind::InvalidInput)?;
    let vars = environment(env)?;
    let (arg_ptrs, var_ptrs) = (null_terminated(&args), null_terminated(&vars));
    let errno = AtomicI32::new(0);
    let child_args = ChildArgs {
        program: program.as_ptr(),
        argv: arg_ptrs.as_ptr(),
        envp: var_ptrs.as_ptr(),
        parent: std::process::id() as libc::pid_t,
        errno: &errno,
    };
    let path_len = std::env::var_os("PATH").map_or(0, |p| p.len());
    let stack_len = STACK_SPARE + 8 * (args.len() + 2) + path_len + program.as_bytes().len();
    let mut stack = Vec::<u8>::with_capacity(stack_len);
    // The stack grows down from its 16-byte aligned top.
    let top = (stack.as_mut_ptr() as usize + stack_len) & !15;
    let pid = with_signals_blocked(&SigSet::all(), || {
        // SAFETY: `child` runs on `stack`, which outlives the call: with CLONE_VFORK this
        // thread resumes only once the child has exec'd or exited, so `child_args` and
        // what it points to stay alive and unchanged while the child reads them. The child
        // makes only system calls (see the module's documentation).
        unsafe {
            libc::clone(
                child,
                top as *mut c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &child_args as *const ChildArgs as *mut c_void,
            )
        }
    });
    let pid = match pid {
        -1 => return Err(io::Error::last_os_error()),
        pid => Pid::from_raw(pid),
    };
    match errno.load(Ordering::Acquire) {
        0 => Ok(Process { pid, status: None }),
        e => {
            let _ = waitpid(pid, None); // it has exited: reap it
            Err(io::Error::from_raw_os_error(e))
        }
    }
}

/// The child: set up, then exec; on failure, leaves errno for the parent and exits 127.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive until this child execs or exits;
    // every call below is a system call (or glibc's `execvpe`, which posix_spawn also runs
    // in a child sharing the parent's memory) on pointers into that prepared data.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        if libc::setpgid(0, 0) != 0 {
            fail(a, last_errno());
        }
        // Rust ignores SIGPIPE in dlock, and an ignored signal stays ignored across exec.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            fail(a, last_errno());
        }
        // dlock died before prctl: the signal will never come, so do not run at all.
        if libc::getppid() != a.parent {
            fail(a, libc::ESRCH);
        }
        libc::execvpe(a.program, a.argv, a.envp);
        fail(a, last_errno())
    }
}

/// Leaves `errno` for the parent and ends the child without running anything of dlock's
/// (no atexit handlers, no flushing of dlock's buffers: they are the parent's).
fn fail(a: &ChildArgs, errno: c_int) -> ! {
    a.errno.store(errno.max(1), Ordering::Release);
    // SAFETY: `_exit` ends this process at once; it touches no memory.
    unsafe { libc::_exit(127) }
}

fn last_errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Runs `f` with `set` blocked in this thread (added to its mask), then restores the mask.
pub(crate) fn with_signals_blocked<T>(set: &SigSet, f: impl FnOnce() -> T) -> T {
    let mut old = SigSet::empty();
    let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(set), Some(&mut old)).is_ok();
    let out = f();
    if blocked {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    out
}

/// dlock's environment with `env` set over it, as `NAME=value` strings.
fn environment(env: &[(&str, String)]) -> io::Result<Vec<CString>> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(name, _)| OsStr::new(name) == k))
        .collect();
    vars.extend(
        env.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    vars.into_iter()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            c_string(&kv)
        })
        .collect()
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument or variable holds a NUL byte",
        )
    })
}

/// The pointers of `strings`, then a null pointer, as `execve` wants them.
fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| CStr::as_ptr(s))
        .chain(std::iter::once(ptr::null()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(mut p: Process) -> ExitStatus {
        loop {
            if let Some(status) = p.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn runs_the_command_with_the_extra_variables_in_its_own_group() {
        let script = r#"[ "$DLOCK_SPAWN_TEST" = "a b" ] && [ "$(cut -d' ' -f5 /proc/$$/stat)" = "$$" ] && [ -n "$PATH" ]"#;
        let argv = ["sh", "-c", script].map(String::from);
        let p = spawn(&argv, &[("DLOCK_SPAWN_TEST", "a b".into())]).unwrap();
        assert_eq!(wait(p).code(), Some(0));
    }

    #[test]
    fn a_missing_command_is_not_found_and_exit_codes_and_signals_come_back() {
        let missing = spawn(&["dlock-no-such-command".into()], &[]).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let p = spawn(&["sh".into(), "-c".into(), "exit 3".into()], &[]).unwrap();
        assert_eq!(wait(p).code(), Some(3));
        let p = spawn(&["sh".into(), "-c".into(), "kill -TERM $$".into()], &[]).unwrap();
        assert_eq!(wait(p).signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_script_without_an_interpreter_line_runs_with_sh_and_a_file_without_x_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("job");
        std::fs::write(&script, "exit 4\n").unwrap();
        let path = script.to_str().unwrap().to_string();
        let refused = spawn(std::slice::from_ref(&path), &[]).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(wait(spawn(&[path], &[]).unwrap()).code(), Some(4));
    }
}
