//! Real PostgreSQL servers for the tests: each its own data directory (a copy of one
//! `initdb` made once under the target directory), a free loopback port, its Unix socket
//! in its own directory; killed with its whole process group on drop.
//!
//! `initdb` and `postgres` refuse to run as root: as root they run as the `postgres`
//! user (which the Debian packages create), their directories handed to it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::free_port;

/// The superuser the tests connect as, and its password.
pub const PG_USER: &str = "dlock";
pub const PG_PASSWORD: &str = "pg-test-secret-31";

/// One postgres server started for one test.
pub struct PostgresServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// Where the PostgreSQL programs are: `DLOCK_PG_BIN`, else the newest Debian install.
pub fn pg_bin(program: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("DLOCK_PG_BIN") {
        return Path::new(&dir).join(program);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    versions.sort();
    match versions.last() {
        Some(v) => v.join("bin").join(program),
        None => PathBuf::from(program),
    }
}

/// The user the server runs as: `postgres` when we are root, else ourselves.
fn server_user() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .expect(
            "as root, the tests run PostgreSQL as the 'postgres' user (apt-get install postgresql)",
        );
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

/// Hands `path` (recursively) to the server's user.
fn hand_over(path: &Path) {
    if let Some((uid, gid)) = server_user() {
        let ok = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "chown {}", path.display());
    }
}

fn as_server_user(cmd: &mut Command) -> &mut Command {
    if let Some((uid, gid)) = server_user() {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// A data directory made by `initdb` once (per PostgreSQL version, kept under the
/// target directory: the tests and the bench of later runs reuse it), copied for each
/// server. Made beside its final place and renamed there, so that test processes running
/// at once never see half of one.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let initdb = pg_bin("initdb");
        let version = initdb
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .map_or("pg".into(), |v| v.to_string_lossy().into_owned());
        let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let done = parent.join(format!("pg-template-{version}"));
        if done.join("data").join("PG_VERSION").exists() {
            return done.join("data");
        }
        let made = parent.join(format!("pg-template-{version}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&made);
        std::fs::create_dir_all(&made).expect("template dir");
        let pwfile = made.join("pw");
        std::fs::write(&pwfile, PG_PASSWORD).expect("password file");
        hand_over(&made);
        let out = as_server_user(&mut Command::new(&initdb))
            .arg("-D")
            .arg(made.join("data"))
            .args([
                "-U",
                PG_USER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args([
                "-N",
                "--wal-segsize=1",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-instructions",
            ])
            .output()
            .expect("cannot run initdb (apt-get install postgresql)");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_file(&pwfile);
        if std::fs::rename(&made, &done).is_err() {
            let _ = std::fs::remove_dir_all(&made); // another process was first
        }
        done.join("data")
    })
}

impl PostgresServer {
    /// Starts a server on a free loopback port.
    pub fn start() -> PostgresServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(template())
            .arg(dir.path().join("data"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(copied, "copy the PostgreSQL template");
        hand_over(dir.path());
        let mut server = PostgresServer {
            port: 0,
            child: None,
            dir,
        };
        for _ in 0..10 {
            server.port = free_port();
            server.spawn();
            if server.await_ready(Duration::from_secs(20)) {
                return server;
            }
        }
        panic!("could not start postgres: {}", server.log_tail());
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// Starts the server's process group (a restart keeps its data).
    fn spawn(&mut self) {
        let log = std::fs::File::create(self.log()).expect("log file");
        let child = as_server_user(&mut Command::new(pg_bin("postgres")))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=60", "-c", "shared_buffers=16MB"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cannot start postgres (apt-get install postgresql)");
        self.child = Some(child);
    }

    /// Ready when the log says so and a real query answers; false when it exited (its
    /// port was taken) or ran out of time.
    fn await_ready(&mut self, limit: Duration) -> bool {
        let pause = Duration::from_millis(20);
        let ready = super::poll(limit, pause, || {
            if super::exited(&mut self.child) {
                return Some(false);
            }
            let logged = std::fs::read_to_string(self.log())
                .is_ok_and(|l| l.contains("ready to accept connections"));
            (logged && self.try_psql("SELECT 1").is_ok_and(|o| o == "1")).then_some(true)
        });
        ready.unwrap_or_else(|| {
            self.kill();
            false
        })
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        super::log_tail(&self.log(), 5)
    }

    /// `postgres://dlock:PASSWORD@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// The URL without the password (give it by `PGPASSWORD`).
    pub fn url_without_password(&self) -> String {
        format!("postgres://{PG_USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs `sql` with psql over TCP; its output, trimmed, or its error.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new(pg_bin("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", PG_USER, "-d", "postgres", "-XAtq", "-c", sql])
            .env("PGPASSWORD", PG_PASSWORD)
            .env("PGCONNECT_TIMEOUT", "3")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        }
    }

    /// [`PostgresServer::try_psql`], panicking when it fails.
    pub fn psql(&self, sql: &str) -> String {
        self.try_psql(sql)
            .unwrap_or_else(|e| panic!("psql {sql:?}: {e}"))
    }

    /// Kills the whole server (SIGKILL to the postmaster, then to each of its children,
    /// which run in sessions of their own) and waits; the data stays.
    pub fn kill(&mut self) {
        use nix::sys::signal::Signal::SIGKILL;
        if let Some(mut child) = self.child.take() {
            let children = children_of(child.id());
            let _ = child.kill();
            let _ = child.wait();
            for pid in children {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), SIGKILL);
            }
        }
    }

    /// Starts the server again on the same port with its data (crash recovery).
    pub fn restart(&mut self) {
        self.kill();
        let up = super::poll(Duration::from_secs(30), Duration::from_millis(200), || {
            self.spawn();
            self.await_ready(Duration::from_secs(15)).then_some(())
        });
        assert!(
            up.is_some(),
            "could not restart postgres: {}",
            self.log_tail()
        );
    }

    /// Freezes every process of the server (SIGSTOP).
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    /// Sends `sig` to the postmaster and every child of it (backends call `setsid`, so
    /// one signal to the process group would miss them).
    fn signal(&self, sig: nix::sys::signal::Signal) {
        let Some(child) = &self.child else { return };
        let mut pids = vec![child.id() as i32];
        pids.extend(children_of(child.id()));
        for pid in pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
}

/// The pids whose parent is `pid`.
fn children_of(pid: u32) -> Vec<i32> {
    let out = Command::new("ps")
        .args(["-o", "pid=", "--ppid", &pid.to_string()])
        .output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    text.unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}
