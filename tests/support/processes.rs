//! Running the `dlock` binary and watching processes: commands with a clean environment,
//! holders started and awaited, signals, and polling instead of sleeping.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The dlock binary built for these tests.
pub fn dlock_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dlock"))
}

/// A `dlock` command with a clean environment for dlock's own variables.
pub fn dlock() -> Command {
    let mut c = Command::new(dlock_bin());
    for v in dlock::env::INHERITED {
        c.env_remove(v);
    }
    c
}

/// `dlock -u URL exec ARGS…`.
pub fn exec_on(url: &str, args: &[&str]) -> Command {
    let mut c = dlock();
    c.args(["-u", url, "exec"]).args(args);
    c
}

/// `dlock exec k -n -u URL -- true`: whether a store at `url` can be used at all.
pub fn exec_true(url: &str) -> Command {
    let mut c = dlock();
    // `-n`: a store that cannot be reached is given the least ride-out, not 30 s.
    c.args(["exec", "k", "-n", "-u", url, "--", "true"]);
    c
}

/// `dlock exec secure -- echo $DLOCK_FENCING_TOKEN` on `url` with only the TLS variables of
/// `env` set (the TLS tests of every store).
pub fn exec_tls<P: AsRef<std::ffi::OsStr>>(url: &str, env: &[(&str, P)]) -> std::process::Output {
    let mut c = dlock();
    c.env("DLOCK_URL", url);
    for var in ["DLOCK_TLS_CA", "DLOCK_TLS_CERT", "DLOCK_TLS_KEY"] {
        c.env_remove(var);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let token = "echo $DLOCK_FENCING_TOKEN";
    c.args(["exec", "secure", "--", "sh", "-c", token]);
    c.output().unwrap()
}

/// Polls `cond` every millisecond until it holds or `limit` passes; returns whether it held.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Milliseconds since the Unix epoch on this machine's clock, which the test servers share.
pub fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.expect("the clock is past 1970").as_millis() as u64
}

/// The expiry of a lease as its server keeps it (ms since the Unix epoch, from `read`),
/// read right after it changed, that is right after a renewal the server accepted: a fault
/// injected at once then comes a whole renewal period before the next renewal, and the
/// value is the expiry the server goes by from then on. Fails the test when no renewal
/// comes within `limit`.
pub fn just_renewed(limit: Duration, mut read: impl FnMut() -> u64) -> u64 {
    let first = read();
    let mut now = first;
    let renewed = wait_for(limit, || {
        now = read();
        now != first
    });
    assert!(renewed, "the lease was not renewed within {limit:?}");
    now
}

/// When a renewal the server accepted came, at the earliest (ms since the Unix epoch on
/// this machine's clock), for servers that say *that* something changed but not when on
/// our clock: `read` (a server's counter or own-clock time of the last renewal) is asked
/// until its answer changes, and the time of the look before the change is returned.
pub fn renewed_after(limit: Duration, mut read: impl FnMut() -> u64) -> u64 {
    let mut before = (now_ms(), read());
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let at = now_ms();
        if read() != before.1 {
            return before.0;
        }
        before.0 = at;
    }
    panic!("no renewal within {limit:?}");
}

/// Waits up to `limit` for `child` to exit.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// True while a process with this pid exists (and is not a zombie we could reap).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Sends a signal (by name, e.g. "INT") to a process.
pub fn send_signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "kill -{sig} {pid}");
}

/// Reads a file that a child writes, once it exists and is non-empty.
pub fn read_when_ready(path: &std::path::Path, limit: Duration) -> String {
    let mut text = String::new();
    let ready = wait_for(limit, || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.ends_with('\n')
    });
    assert!(ready, "{} was not written within {limit:?}", path.display());
    text.trim().to_string()
}

/// What a finished child wrote to stderr.
pub fn stderr_of(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Starts `dlock exec KEY EXTRA… -- sh -c 'echo $$ > READY; SCRIPT'` from the `dlock`
/// command given (its environment picks the store), with stdout and stderr piped, and waits
/// until the command runs. Returns dlock and the command's pid.
pub fn hold_with(
    mut dlock: Command,
    key: &str,
    extra: &[&str],
    script: &str,
    dir: &std::path::Path,
) -> (Child, u32) {
    let ready = dir.join(format!("ready-{key}"));
    dlock
        .args(["exec", key])
        .args(extra)
        .args(["--", "sh", "-c"]);
    dlock.arg(format!("echo $$ > '{}'; {script}", ready.display()));
    let child = dlock
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = read_when_ready(&ready, Duration::from_secs(10))
        .parse()
        .unwrap();
    (child, pid)
}

/// Output bytes as text, trimmed.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// The command that prints the fencing token of the lock it holds: the tail of an
/// `exec` whose arguments come before it.
pub const ECHO_TOKEN: [&str; 4] = ["--", "sh", "-c", "echo $DLOCK_FENCING_TOKEN"];

/// Runs `dlock`, an `exec` whose command is still to come, with [`ECHO_TOKEN`]: its
/// fencing token, or the exit code and stderr when it fails.
pub fn try_token_of(dlock: &mut Command) -> Result<u64, (Option<i32>, String)> {
    let out = dlock.args(ECHO_TOKEN).output().unwrap();
    match (out.status.code(), text(&out.stdout).parse()) {
        (Some(0), Ok(token)) => Ok(token),
        (code, _) => Err((code, String::from_utf8_lossy(&out.stderr).to_string())),
    }
}

/// As [`try_token_of`], which must succeed.
pub fn token_of(dlock: &mut Command) -> u64 {
    try_token_of(dlock).unwrap_or_else(|(code, err)| panic!("exit {code:?}: {err}"))
}

/// A child killed (SIGKILL) and reaped when the test ends, a failed one included: a test
/// that panics must not leave a process running.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// The remote ports of `pid`'s established TCP connections (from its socket descriptors
/// and the kernel's connection tables): which servers a process is talking to, seen
/// from the process itself rather than from a server's counters.
pub fn tcp_peer_ports(pid: u32) -> Vec<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: Vec<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            let inode = link.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_string())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for row in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = row.split_whitespace().collect();
            let established = f.get(3) == Some(&"01");
            if established && f.get(9).is_some_and(|i| inodes.iter().any(|n| n == i)) {
                let port = f[2]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                ports.extend(port);
            }
        }
    }
    ports
}

/// The lines `from` gives (a child's stdout or stderr), read on a thread of their own and
/// sent on a channel, so that a test waits for a line with a timeout instead of hanging.
pub fn lines_of(from: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}
