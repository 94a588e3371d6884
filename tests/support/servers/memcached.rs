//! `memcached` processes for one test each, killed on drop.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// A memcached started for one test; killed on drop.
pub struct MemcachedServer {
    pub port: u16,
    child: Option<Child>,
    extra: Vec<String>,
}

impl MemcachedServer {
    /// Starts a server on a free loopback port (TCP only).
    pub fn start() -> MemcachedServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra `memcached` arguments (e.g. `["-m", "2"]`).
    pub fn start_with(extra: &[&str]) -> MemcachedServer {
        Self::try_start(extra, |_| {}).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`MemcachedServer::start_with`], with `prepare` applied to the command (the
    /// bench makes the server die with it); a server that cannot start is an error.
    pub fn try_start(extra: &[&str], prepare: fn(&mut Command)) -> Result<MemcachedServer, String> {
        let mut server = MemcachedServer {
            port: 0,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for _ in 0..20 {
            server.port = free_port();
            if server.try_spawn(prepare)? {
                return Ok(server);
            }
        }
        Err("could not start memcached on a free port".into())
    }

    /// Starts the server on `self.port`: false if it exited (the port was taken) or did not
    /// get ready in time.
    fn try_spawn(&mut self, prepare: fn(&mut Command)) -> Result<bool, String> {
        let mut command = Command::new("memcached");
        prepare(&mut command);
        command.args(["-l", "127.0.0.1", "-p", &self.port.to_string(), "-U", "0"]);
        if nix::unistd::geteuid().is_root() {
            command.args(["-u", "root"]); // memcached refuses to run as root without it
        }
        let mut child = command
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start memcached (apt-get install memcached): {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return Ok(false); // port taken by someone else: try another
            }
            // Ready when a real request answers, and from our own process: another
            // test's server may have taken the port first.
            if server_pid(self.port) == Some(child.id()) {
                self.child = Some(child);
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(false)
    }

    /// `memcached://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("memcached://127.0.0.1:{}", self.port)
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL) and waits for it; everything it held is lost.
    pub fn kill(&mut self) {
        super::kill(&mut self.child);
    }

    /// Freezes the server (SIGSTOP).
    pub fn pause(&self) {
        super::signal(&self.child, nix::sys::signal::Signal::SIGSTOP);
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        super::signal(&self.child, nix::sys::signal::Signal::SIGCONT);
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let up = super::poll(Duration::from_secs(10), Duration::from_millis(50), || {
            self.try_spawn(|_| {})
                .unwrap_or_else(|e| panic!("{e}"))
                .then_some(())
        });
        assert!(
            up.is_some(),
            "could not restart memcached on port {}",
            self.port
        );
    }

    /// One number of `stats`.
    pub fn stat(&self, name: &str) -> u64 {
        let prefix = format!("STAT {name} ");
        let lines = ask(self.port, "stats", |l| l == "END").unwrap_or_default();
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Sends one text-protocol request and returns the reply's lines up to one that
    /// `last` accepts.
    pub fn ask(&self, request: &str, last: fn(&str) -> bool) -> Vec<String> {
        ask(self.port, request, last).expect("memcached answers")
    }
}

/// The `pid` that `stats` reports on `port`, if a memcached answers there.
fn server_pid(port: u16) -> Option<u32> {
    let lines = ask(port, "stats", |l| l == "END")?;
    lines
        .iter()
        .find_map(|l| l.strip_prefix("STAT pid "))
        .and_then(|p| p.trim().parse().ok())
}

fn ask(port: u16, request: &str, last: fn(&str) -> bool) -> Option<Vec<String>> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    conn.write_all(format!("{request}\r\n").as_bytes()).ok()?;
    let mut lines = Vec::new();
    for line in BufReader::new(conn).lines() {
        let line = line.ok()?;
        let done = last(&line);
        lines.push(line);
        if done {
            return Some(lines);
        }
    }
    None
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        self.kill();
    }
}
