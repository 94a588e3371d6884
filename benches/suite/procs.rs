//! Interruption, and the child processes the suite runs: each one is watched and killed if
//! it outlives its limit, or when the suite is interrupted.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

/// Set on Ctrl-C: every loop stops, servers are killed and temp dirs removed as usual.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// The suite's temporary directory: every store and server directory is inside.
pub static ROOT: OnceLock<PathBuf> = OnceLock::new();
/// Servers running now, for the last-resort clean-up.
static SERVERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

pub fn temp_dir() -> Result<tempfile::TempDir, String> {
    match ROOT.get() {
        Some(root) => tempfile::tempdir_in(root),
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("temp dir: {e}"))
}

/// On SIGINT, SIGTERM or SIGHUP, asks the suite to stop (it then cleans up as usual); on a
/// second signal, or if it has not finished 10 s later, kills the servers, removes the
/// temporary directory and exits. `ctrlc` runs the handler on a thread of its own, so that
/// a backend call that never returns cannot keep it from acting. (Not tokio's signals:
/// that feature would make `enable_all` start a signal driver in the dlock binary the
/// suite measures, which the release build does not have.)
pub fn handle_signals() {
    let handled = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            bail_out();
        }
        eprintln!("\nsuite: interrupted; stopping (a second signal quits at once)");
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(10));
            bail_out();
        });
    });
    if let Err(e) = handled {
        eprintln!("suite: cannot catch signals: {e}");
    }
}

/// Kills the servers, removes the temporary directory and exits 130.
fn bail_out() {
    for &pid in lock(&SERVERS).iter() {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    if let Some(root) = ROOT.get() {
        let _ = std::fs::remove_dir_all(root);
    }
    std::process::exit(130);
}

pub fn server_started(pid: u32) {
    lock(&SERVERS).push(pid);
}

pub fn server_stopped(pid: u32) {
    lock(&SERVERS).retain(|&p| p != pid);
}

/// Children being waited for, and when the watchdog must SIGKILL them.
static WATCHED: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
static WATCHDOG: Once = Once::new();

fn watch(pid: u32, deadline: Instant) {
    WATCHDOG.call_once(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = Instant::now();
            let list = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
            for &(pid, deadline) in list.iter() {
                if now >= deadline || interrupted() {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                }
            }
        });
    });
    lock(&WATCHED).push((pid, deadline));
}

fn unwatch(pid: u32) {
    lock(&WATCHED).retain(|&(p, _)| p != pid);
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A started child, SIGKILLed by the watchdog if it outlives its deadline.
pub struct Running {
    pub child: Child,
    start: Instant,
    deadline: Instant,
}

pub fn spawn(cmd: &mut Command, limit: Duration) -> Result<Running, String> {
    if interrupted() {
        return Err("interrupted".into());
    }
    let start = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", cmd.get_program().to_string_lossy()))?;
    let deadline = start + limit;
    watch(child.id(), deadline);
    Ok(Running {
        child,
        start,
        deadline,
    })
}

impl Running {
    /// Waits for the exit; returns the wall time since the spawn and the status.
    pub fn finish(mut self) -> Result<(Duration, ExitStatus), String> {
        let pid = self.child.id();
        // Wait without reaping, so the pid cannot be reused before the watchdog forgets it.
        let waited = loop {
            match waitid(
                Id::Pid(Pid::from_raw(pid as i32)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Err(Errno::EINTR) => continue,
                other => break other,
            }
        };
        let end = Instant::now();
        unwatch(pid);
        let status = self.child.wait().map_err(|e| format!("wait: {e}"))?;
        waited.map_err(|e| format!("waitid: {e}"))?;
        if status.signal() == Some(libc::SIGKILL) && (end >= self.deadline || interrupted()) {
            return Err(if interrupted() {
                "interrupted".into()
            } else {
                format!(
                    "timed out after {:.0?}",
                    self.deadline.duration_since(self.start)
                )
            });
        }
        Ok((end.duration_since(self.start), status))
    }
}

/// Runs `cmd` with no input or output; returns its wall time and status.
pub fn run(cmd: &mut Command, limit: Duration) -> Result<(Duration, ExitStatus), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn(cmd, limit)?.finish()
}

/// Runs `cmd` once, keeping its stdout and stderr; an error unless it exits 0.
pub fn run_checked(cmd: &mut Command, limit: Duration) -> Result<(Duration, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut r = spawn(cmd, limit)?;
    let mut out_pipe = r.child.stdout.take().expect("piped stdout");
    let mut err_pipe = r.child.stderr.take().expect("piped stderr");
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut out = String::new();
    let _ = out_pipe.read_to_string(&mut out);
    let err = errs.join().unwrap_or_default();
    let (took, status) = r.finish()?;
    check(status, &err)?;
    Ok((took, out))
}

/// Ok for exit 0; otherwise the code and the last line the command wrote on stderr.
pub fn check(status: ExitStatus, stderr: &str) -> Result<(), String> {
    if status.success() {
        return Ok(());
    }
    let how = match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "failed".into(),
    };
    match stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => Err(format!("{how}: {line}")),
        None => Err(how),
    }
}

pub fn status_error(status: ExitStatus) -> String {
    check(status, "").err().unwrap_or_default()
}

/// Children spawned for a measurement, killed if the measurement is abandoned.
pub struct Guard(pub Vec<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Makes `cmd`'s process die with the suite, even if the suite is SIGKILLed. Only for
/// children spawned by the main thread (the signal follows the spawning thread).
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        })
    }
}

pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
