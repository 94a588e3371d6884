//! Real ZooKeeper servers for the tests (Debian's `zookeeper` package, run with the
//! machine's JDK): a standalone server or a 3-server ensemble, on free loopback ports in
//! temporary directories, with TTL nodes enabled and the admin server off; ready when the
//! `srvr` command says the server serves; killed on drop. Never the system's server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::free_port;

/// Where Debian's package puts the server's jar (its manifest names the rest).
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// What the Netty connection factory (the one that serves TLS) needs beyond the jar's
/// manifest.
const NETTY_JARS: &str = "/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar:\
                          /usr/share/java/netty-transport-native-unix-common.jar";

/// One ZooKeeper server started for one test.
pub struct ZkServer {
    pub id: u32,
    pub client_port: u16,
    /// `server.N=…` lines of the whole ensemble; empty when standalone.
    ensemble: String,
    /// More zoo.cfg lines, for one test's server (see [`ZkServer::start_with`]).
    extra: String,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl ZkServer {
    /// Starts a standalone server on a free loopback port.
    pub fn start() -> ZkServer {
        ZkServer::start_with("")
    }

    /// Starts a standalone server that also serves TLS (Netty) on the port returned: its
    /// certificate and key from the PEM file `keystore`, a client's certificate checked
    /// against the CA in `ca` and required when `need_client_cert`.
    pub fn start_tls(keystore: &Path, ca: &Path, need_client_cert: bool) -> (ZkServer, u16) {
        let port = free_port();
        let auth = if need_client_cert { "need" } else { "none" };
        let extra = format!(
            "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth={auth}\n",
            keystore.display(),
            ca.display()
        );
        let server = ZkServer::start_with(&extra);
        // The secure port opens after the plain one, which `srvr` asked.
        let open = super::poll(Duration::from_secs(30), Duration::from_millis(50), || {
            TcpStream::connect(("127.0.0.1", port)).ok().map(drop)
        });
        assert!(open.is_some(), "no TLS port {port}{}", server.log_tail());
        (server, port)
    }

    /// Starts a standalone server whose zoo.cfg has the lines `extra` too (e.g.
    /// `maxClientCnxns=1`).
    pub fn start_with(extra: &str) -> ZkServer {
        for _ in 0..5 {
            let mut server = ZkServer::new(1, free_port());
            server.extra = extra.to_string();
            server.spawn();
            if server.await_ready(Duration::from_secs(30)) {
                return server;
            }
        }
        panic!("could not start ZooKeeper on a free port (apt-get install zookeeper default-jdk-headless)");
    }

    fn new(id: u32, client_port: u16) -> ZkServer {
        ZkServer {
            id,
            client_port,
            ensemble: String::new(),
            extra: String::new(),
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    /// zoo.cfg: a short tick so that tests can use short sessions (2 × tickTime at least),
    /// and a long maximum so that the CLI's default TTL is granted as asked.
    fn config(&self) -> String {
        let data = self.dir.path().join("data");
        format!(
            "tickTime=100\ninitLimit=50\nsyncLimit=10\ndataDir={}\nclientPort={}\n\
             clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
             4lw.commands.whitelist=srvr,ruok,stat,cons\nminSessionTimeout=1000\n\
             maxSessionTimeout=120000\nreconfigEnabled=false\n{}{}",
            data.display(),
            self.client_port,
            self.ensemble,
            self.extra
        )
    }

    /// Starts the server's process (a restart keeps its data directory).
    fn spawn(&mut self) {
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).expect("data dir");
        std::fs::write(data.join("myid"), self.id.to_string()).expect("myid");
        let cfg = self.dir.path().join("zoo.cfg");
        std::fs::write(&cfg, self.config()).expect("zoo.cfg");
        let log = std::fs::File::create(self.log()).expect("log file");
        let classpath = match self.extra.contains("NettyServerCnxnFactory") {
            true => format!("{ZOOKEEPER_JAR}:{NETTY_JARS}"),
            false => ZOOKEEPER_JAR.to_string(),
        };
        let child = Command::new("java")
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dzookeeper.extendedTypesEnabled=true")
            .arg("-Dzookeeper.admin.enableServer=false")
            .args(["-cp", &classpath])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("cannot start java (apt-get install default-jdk-headless zookeeper)");
        self.child = Some(child);
    }

    /// Waits until `srvr` says the server serves (standalone, leader or follower); false
    /// when it exited (a port was taken) or ran out of time.
    fn await_ready(&mut self, limit: Duration) -> bool {
        let pause = Duration::from_millis(50);
        let ready = super::poll(limit, pause, || {
            if super::exited(&mut self.child) {
                return Some(false);
            }
            self.mode().is_some().then_some(true)
        });
        ready.unwrap_or_else(|| {
            self.kill();
            false
        })
    }

    /// What `srvr` says the server is (`standalone`, `leader`, `follower`), when it serves.
    pub fn mode(&self) -> Option<String> {
        let answer = self.four_letters("srvr")?;
        let line = answer.lines().find_map(|l| l.strip_prefix("Mode: "))?;
        Some(line.trim().to_string())
    }

    /// The session of this server's one client, as `cons` says: when the server last
    /// answered it (`lresp`, on the server's own monotonic clock, in ms) and the session
    /// timeout (`to`, ms); `None` when no client session is connected here.
    pub fn session(&self) -> Option<(u64, u64)> {
        let cons = self.four_letters("cons")?;
        let field = |line: &str, name: &str| -> Option<u64> {
            let at = line.find(&format!(",{name}="))? + name.len() + 2;
            line[at..].split([',', ')']).next()?.parse().ok()
        };
        let sessions: Vec<(u64, u64)> = cons
            .lines()
            .filter_map(|l| Some((field(l, "lresp")?, field(l, "to")?)))
            .collect();
        assert!(sessions.len() <= 1, "several sessions: {cons}");
        sessions.first().copied()
    }

    /// Sends a four-letter command and returns the answer.
    fn four_letters(&self, cmd: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.client_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(cmd.as_bytes()).ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        Some(answer)
    }

    /// The last lines of the server's log, for a failure message.
    pub fn log_tail(&self) -> String {
        format!(
            "\nzookeeper {}: {}",
            self.id,
            super::log_tail(&self.log(), 5)
        )
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// `zk://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("zk://{}", self.endpoint())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL) and waits for it; its data directory stays.
    pub fn kill(&mut self) {
        super::kill(&mut self.child);
    }

    /// Freezes the server's JVM (SIGSTOP).
    pub fn pause(&self) {
        super::signal(&self.child, nix::sys::signal::Signal::SIGSTOP);
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        super::signal(&self.child, nix::sys::signal::Signal::SIGCONT);
    }

    /// Starts the server again on the same ports with its data, and waits until it serves.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(
            self.await_ready(Duration::from_secs(30)),
            "could not restart ZooKeeper {}{}",
            self.id,
            self.log_tail()
        );
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three servers of one ensemble, on free loopback ports.
pub struct ZkEnsemble {
    pub servers: Vec<ZkServer>,
}

impl ZkEnsemble {
    pub fn start() -> ZkEnsemble {
        let mut last = String::new();
        for _ in 0..3 {
            let mut servers: Vec<ZkServer> =
                (1..=3).map(|i| ZkServer::new(i, free_port())).collect();
            let lines: Vec<String> = servers
                .iter()
                .map(|s| {
                    format!(
                        "server.{}=127.0.0.1:{}:{}\n",
                        s.id,
                        free_port(),
                        free_port()
                    )
                })
                .collect();
            for s in &mut servers {
                s.ensemble = lines.concat();
                s.spawn();
            }
            let limit = Duration::from_secs(40);
            if servers.iter_mut().all(|s| s.await_ready(limit)) {
                return ZkEnsemble { servers };
            }
            last = servers.iter().map(ZkServer::log_tail).collect();
        }
        panic!("could not start a 3-server ZooKeeper ensemble on free ports: {last}");
    }

    /// `zk://a,b,c` naming every server.
    pub fn url(&self) -> String {
        let eps: Vec<String> = self.servers.iter().map(ZkServer::endpoint).collect();
        format!("zk://{}", eps.join(","))
    }

    /// The index of the current leader.
    pub fn leader(&self) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.mode().as_deref() == Some("leader"))
    }
}
