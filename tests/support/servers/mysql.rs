//! Real MariaDB servers for the tests: each its own data directory (a copy of one
//! `mariadb-install-db` made once under the target directory), a free loopback port, its
//! socket in its own directory, a small InnoDB; killed on drop. Never the machine's own
//! server on 3306.
//!
//! `mariadbd` refuses to run as root unless told `--user=root`; as root it is told so.
//! Each server runs an init file at every start that creates the password-protected
//! account the tests use, its database, and dlock's default tables (DDL costs MariaDB a
//! good part of a second, which would otherwise show in every test's first command;
//! `tests/mysql.rs` checks that dlock creates them on first use).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::free_port;

/// The account the tests connect as, its password and its database.
pub const MY_USER: &str = "dlock";
pub const MY_PASSWORD: &str = "my-test-secret-47";
pub const MY_DB: &str = "dlock";

/// One MariaDB server started for one test.
pub struct MysqlServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// More options for `mariadbd` (TLS).
    extra: Vec<String>,
}

/// Options every server and the template's bootstrap share: small and quick. Commits
/// reach the kernel without an fsync, which a killed server (the tests' crash) survives.
const SMALL: [&str; 7] = [
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
    "--innodb-flush-method=nosync",
    "--innodb-log-file-size=4M",
    "--innodb-buffer-pool-size=8M",
    "--skip-log-bin",
    "--performance-schema=OFF",
];

/// `mariadbd` from the PATH, else from `/usr/sbin` (not on a user's PATH on Debian).
fn mariadbd() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("mariadbd").exists()));
    match on_path {
        true => PathBuf::from("mariadbd"),
        false => PathBuf::from("/usr/sbin/mariadbd"),
    }
}

/// `--user=root` when we are root (mariadbd refuses root otherwise).
fn as_user() -> Option<&'static str> {
    nix::unistd::geteuid().is_root().then_some("--user=root")
}

/// A data directory made by `mariadb-install-db` once (kept under the target directory:
/// later runs and the bench reuse it), copied for each server. Made beside its final place
/// and renamed there, so that test processes running at once never see half of one.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let done = parent.join("mariadb-template");
        if done.join("data").join("mysql").exists() {
            return done.join("data");
        }
        let made = parent.join(format!("mariadb-template.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&made);
        std::fs::create_dir_all(&made).expect("template dir");
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", made.join("data").display()))
            .args(as_user())
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(SMALL)
            .stdin(Stdio::null())
            .output()
            .expect("cannot run mariadb-install-db (apt-get install mariadb-server)");
        assert!(
            out.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if std::fs::rename(&made, &done).is_err() {
            let _ = std::fs::remove_dir_all(&made); // another process was first
        }
        done.join("data")
    })
}

impl MysqlServer {
    /// Starts a server on a free loopback port.
    pub fn start() -> MysqlServer {
        Self::start_with(Vec::new())
    }

    /// Starts a server that also serves TLS with `pki`'s server certificate, and
    /// refuses clients that do not use it.
    pub fn start_tls(pki: &super::tls::Pki) -> MysqlServer {
        Self::start_with(vec![
            format!("--ssl-ca={}", pki.ca.display()),
            format!("--ssl-cert={}", pki.server_cert.display()),
            format!("--ssl-key={}", pki.server_key.display()),
            "--require-secure-transport=ON".to_string(),
        ])
    }

    fn start_with(extra: Vec<String>) -> MysqlServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(template())
            .arg(dir.path().join("data"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(copied, "copy the MariaDB template");
        let init = format!(
            "CREATE USER IF NOT EXISTS '{MY_USER}'@'%' IDENTIFIED BY '{MY_PASSWORD}';\n\
             GRANT ALL ON *.* TO '{MY_USER}'@'%' WITH GRANT OPTION;\n\
             CREATE DATABASE IF NOT EXISTS {MY_DB};\n\
             USE {MY_DB};\n"
        );
        // The table as dlock makes it (a build without the MySQL store has no MySQL tests).
        #[cfg(feature = "mysql")]
        let init = dlock::backend::mysql::schema::Names::new("dlock_locks")
            .ddl()
            .iter()
            .fold(init, |s, ddl| s + &ddl.replace('\n', " ") + ";\n");
        std::fs::write(dir.path().join("init.sql"), init).expect("init file");
        let mut server = MysqlServer {
            port: 0,
            child: None,
            dir,
            extra,
        };
        for _ in 0..10 {
            server.port = free_port();
            server.spawn();
            if server.await_ready(Duration::from_secs(30)) {
                return server;
            }
        }
        panic!("could not start mariadbd: {}", server.log_tail());
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("mariadb.log")
    }

    /// Starts the server (a restart keeps its data).
    fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.log());
        let d = self.dir.path();
        // Its own directory for internal temporary tables: servers sharing /tmp have had
        // one's file gone under the other ("Error on delete of '/tmp/#sql-temptable-…'").
        let tmp = d.join("tmp");
        std::fs::create_dir_all(&tmp).expect("the server's tmpdir");
        let child = Command::new(mariadbd())
            .arg("--no-defaults")
            .args(as_user())
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--socket={}", d.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", d.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", self.log().display()))
            .arg(format!("--init-file={}", d.join("init.sql").display()))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(["--max-connections=100", "--loose-innodb-use-native-aio=0"])
            .args(SMALL)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start mariadbd (apt-get install mariadb-server)");
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
                .is_ok_and(|l| l.contains("ready for connections"));
            (logged && self.try_sql("SELECT 1").is_ok_and(|o| o == "1")).then_some(true)
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

    /// `mysql://dlock:PASSWORD@127.0.0.1:PORT/dlock`.
    pub fn url(&self) -> String {
        format!(
            "mysql://{MY_USER}:{MY_PASSWORD}@127.0.0.1:{}/{MY_DB}",
            self.port
        )
    }

    /// The URL without the password (give it by `MYSQL_PWD`).
    pub fn url_without_password(&self) -> String {
        format!("mysql://{MY_USER}@127.0.0.1:{}/{MY_DB}", self.port)
    }

    /// Runs `sql` with the `mariadb` client over TCP; its output, trimmed, or its error.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .args(["-h", "127.0.0.1", "-P", &self.port.to_string()])
            .args([
                "-u",
                MY_USER,
                "-D",
                MY_DB,
                "-N",
                "-B",
                "--connect-timeout=3",
            ])
            .args(["-e", sql])
            .args((!self.extra.is_empty()).then_some("--ssl"))
            .env("MYSQL_PWD", MY_PASSWORD)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        }
    }

    /// [`MysqlServer::try_sql`], panicking when it fails.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("mariadb {sql:?}: {e}"))
    }

    /// Kills the server (SIGKILL) and waits; the data stays.
    pub fn kill(&mut self) {
        super::kill(&mut self.child);
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
            "could not restart mariadbd: {}",
            self.log_tail()
        );
    }

    /// Freezes the server (SIGSTOP: one process, many threads).
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        super::signal(&self.child, sig);
    }
}

impl Drop for MysqlServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}
