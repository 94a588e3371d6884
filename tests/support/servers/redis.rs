//! `redis-server` processes for one test each: plain servers and Sentinels, stopped,
//! paused and restarted on demand.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::net::TcpStream;

use super::free_port;

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
        Self::start_sentinel_with(&format!(
            "sentinel monitor {name} 127.0.0.1 {master_port} 1\n"
        ))
    }

    /// Starts a Sentinel with the configuration `config` (its `sentinel monitor` line and
    /// any tuning).
    pub fn start_sentinel_with(config: &str) -> RedisServer {
        let server = RedisServer {
            port: 0,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            extra: Vec::new(),
            sentinel: Some(config.to_string()),
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
        super::kill(&mut self.child);
    }

    /// Starts the server again on the same port (empty, as there is no persistence).
    pub fn restart(&mut self) {
        self.kill();
        let up = super::poll(Duration::from_secs(10), Duration::from_millis(50), || {
            self.try_spawn()
                .unwrap_or_else(|e| panic!("{e}"))
                .then_some(())
        });
        assert!(
            up.is_some(),
            "could not restart redis-server on port {}",
            self.port
        );
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

    /// The password the server was started with (`--requirepass`), if any.
    pub fn password(&self) -> Option<&str> {
        let at = self.extra.iter().position(|a| a == "--requirepass")?;
        self.extra.get(at + 1).map(String::as_str)
    }

    /// Runs `redis-cli` against this server (with its password) and returns its stdout,
    /// trimmed. Fails the test when redis-cli cannot reach the server or the server answers
    /// with an error: a command of the harness that did nothing is not a fault injected.
    pub fn cli(&self, args: &[&str]) -> String {
        self.cli_may_fail(args)
            .unwrap_or_else(|e| panic!("redis-cli -p {} {}: {e}", self.port, args.join(" ")))
    }

    /// When `key` expires, as this server keeps it (`PEXPIRETIME`: ms since the Unix epoch);
    /// fails the test when the key is missing or has no expiry.
    pub fn expiry_ms(&self, key: &str) -> u64 {
        let at = self.cli(&["PEXPIRETIME", key]);
        at.parse::<i64>()
            .ok()
            .and_then(|at| u64::try_from(at).ok())
            .unwrap_or_else(|| panic!("{key} has no expiry on {}: {at}", self.port))
    }

    /// [`RedisServer::cli`] where a failure is expected or harmless (a poll while a node
    /// comes up): the trimmed stdout, or redis-cli's error (its stderr, or the error reply).
    pub fn cli_may_fail(&self, args: &[&str]) -> Result<String, String> {
        let mut cli = Command::new("redis-cli");
        if let Some(password) = self.password() {
            cli.env("REDISCLI_AUTH", password);
        }
        // `-e`: an error reply is exit 1 (redis-cli says 0 otherwise).
        let out = cli
            .args(["-e", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(format!("{} {stderr}{stdout}", out.status))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill(); // SIGKILL works on a paused server too.
    }
}
