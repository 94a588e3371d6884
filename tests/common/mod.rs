//! Test harness shared by the integration tests: real `redis-server` processes on free
//! loopback ports, and helpers to run the `dlock` binary.
//!
//! Every server gets its own port and directory, so tests run in parallel safely.

#![allow(dead_code, unused_macros)]

/// Runs each test body once per backend, as `local::name`, `redis::name` and
/// `redlock::name` (three servers).
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod local {
            $( #[test] fn $name() { super::$name(super::Store::local()); } )*
        }
        mod redis {
            $( #[test] fn $name() { super::$name(super::Store::redis()); } )*
        }
        mod redlock {
            $( #[test] fn $name() { super::$name(super::Store::redlock()); } )*
        }
    };
}

pub mod etcd;
#[allow(unused_imports)]
pub use etcd::{EtcdCluster, EtcdServer};

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server started for one test; killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// For a Sentinel: the configuration it starts from (it rewrites its file).
    sentinel: Option<String>,
    /// Applied to the command before each start (the bench makes the server die with it).
    prepare: fn(&mut Command),
}

impl RedisServer {
    /// Starts a server with no persistence on a free loopback port.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (e.g. `["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::try_start_in(extra, &std::env::temp_dir(), |_| {}).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`RedisServer::start_with`], but the server's directory is made inside `parent`,
    /// `prepare` is applied to its command, and a server that cannot start is an error.
    pub fn try_start_in(
        extra: &[&str],
        parent: &Path,
        prepare: fn(&mut Command),
    ) -> Result<RedisServer, String> {
        let dir = tempfile::tempdir_in(parent).map_err(|e| format!("temp dir: {e}"))?;
        let server = RedisServer {
            port: 0,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            sentinel: None,
            prepare,
        };
        server.spawn_on_a_free_port()
    }

    /// Starts a Sentinel (`redis-server --sentinel`) that watches the master on
    /// `127.0.0.1:master_port` under `name`, with a quorum of one.
    pub fn start_sentinel(master_port: u16, name: &str) -> RedisServer {
        let server = RedisServer {
            port: 0,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            extra: Vec::new(),
            sentinel: Some(format!(
                "sentinel monitor {name} 127.0.0.1 {master_port} 1\n"
            )),
            prepare: |_| {},
        };
        server
            .spawn_on_a_free_port()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn spawn_on_a_free_port(mut self) -> Result<RedisServer, String> {
        for _ in 0..20 {
            self.port = free_port();
            if self.try_spawn()? {
                return Ok(self);
            }
        }
        Err("could not start redis-server on a free port".into())
    }

    /// Starts the server on `self.port`: false if it exited (the port was taken) or did not
    /// get ready in time, an error if it cannot be run at all.
    fn try_spawn(&mut self) -> Result<bool, String> {
        let mut command = Command::new("redis-server");
        (self.prepare)(&mut command);
        if let Some(config) = &self.sentinel {
            let file = self.dir.path().join("sentinel.conf");
            std::fs::write(&file, config).expect("write sentinel.conf");
            command.arg(file).arg("--sentinel");
        }
        command.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"]);
        if self.sentinel.is_none() {
            command.args(["--save", "", "--appendonly", "no"]);
        }
        // Readiness is read from the server's own log: a TCP connect alone could reach
        // another test's server that took the same port first (ours then exits).
        let log = self.dir.path().join("redis.log");
        let _ = std::fs::remove_file(&log);
        let ready = if self.sentinel.is_some() {
            "+monitor master"
        } else {
            "Ready to accept connections"
        };
        let mut child = command
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server (apt-get install redis-server): {e}")
            })?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return Ok(false); // port taken by someone else: try another
            }
            let logged = std::fs::read_to_string(&log).is_ok_and(|l| l.contains(ready));
            if logged && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                self.child = Some(child);
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(false)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL) and waits for it; its data is lost.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port (empty, as there is no persistence).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.try_spawn().unwrap_or_else(|e| panic!("{e}")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing answers.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Runs `redis-cli` against this server and returns its stdout, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill(); // SIGKILL works on a paused server too.
    }
}

/// A port that was free a moment ago (the kernel picks it; we release it at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The dlock binary built for these tests.
pub fn dlock_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dlock"))
}

/// A `dlock` command with a clean environment for dlock's own variables.
pub fn dlock() -> Command {
    let mut c = Command::new(dlock_bin());
    for v in dlock::config::INHERITED_ENV {
        c.env_remove(v);
    }
    c
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

/// Where a CLI test keeps its locks: a fresh local store directory, a fresh Redis server,
/// or three fresh Redis servers (Redlock).
pub enum Store {
    Local(tempfile::TempDir),
    Redis(RedisServer),
    Redlock(Vec<RedisServer>),
}

impl Store {
    /// A local store in a new temporary directory.
    pub fn local() -> Store {
        Store::Local(tempfile::tempdir().expect("temp dir"))
    }

    /// A new redis-server.
    pub fn redis() -> Store {
        Store::Redis(RedisServer::start())
    }

    /// Three new redis-servers, used as a Redlock quorum.
    pub fn redlock() -> Store {
        Store::Redlock((0..3).map(|_| RedisServer::start()).collect())
    }

    /// A `dlock` command pointed at this store (through the environment, as users do).
    pub fn dlock(&self) -> Command {
        let mut c = dlock();
        match self {
            Store::Local(dir) => c.env("DLOCK_DIR", dir.path()),
            Store::Redis(server) => c.env("DLOCK_URL", server.url()),
            Store::Redlock(servers) => {
                let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
                c.env("DLOCK_URL", urls.join(","))
            }
        };
        c
    }

    /// `sh -c SCRIPT` with the same environment as [`Store::dlock`], for scripts that call
    /// dlock themselves (through [`dlock_bin`]).
    pub fn shell(&self, script: &str) -> Command {
        let mut sh = Command::new("sh");
        sh.args(["-c", script]);
        for (k, v) in self.dlock().get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        sh
    }

    /// The Redis server, for fault injection.
    pub fn server(&mut self) -> &mut RedisServer {
        match self {
            Store::Redis(s) => s,
            Store::Local(_) | Store::Redlock(_) => panic!("not a single Redis store"),
        }
    }
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

/// Wait options that wait forever, and a receiver that fires once the waiter has been
/// refused and is waiting: every backend reports progress after its first refused attempt
/// (by then queued, where the backend keeps a queue). Tests await it instead of sleeping.
/// The receiver fails if the acquisition ended without ever waiting.
pub fn waiting_forever() -> (
    dlock::backend::WaitOptions,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let told = move |_: &dlock::backend::WaitInfo| {
        if let Some(tx) = tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
    };
    let wait = dlock::backend::WaitOptions {
        progress: Some(std::sync::Arc::new(told)),
        ..dlock::backend::WaitOptions::until(None)
    };
    (wait, rx)
}
