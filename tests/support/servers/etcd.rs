//! Real `etcd` members for the tests: a single member or a 3-member cluster, on free
//! loopback ports (client and peer) in temporary directories, killed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::free_port;

/// One etcd member started for one test.
pub struct EtcdServer {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    /// `name=http://127.0.0.1:PEER,…` of the whole cluster.
    initial_cluster: String,
    /// `--heartbeat-interval` and `--election-timeout`, in milliseconds.
    timings: (u32, u32),
    /// Clients speak TLS and show a certificate of this CA: (CA, server cert, server key).
    tls: Option<[PathBuf; 3]>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// Data directories on tmpfs when there is one: an fsync there costs nothing, which keeps
/// Raft writes fast on a loaded test machine (the bench keeps etcd's default durability).
fn data_parent() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl EtcdServer {
    /// Starts a single-member cluster on free loopback ports.
    pub fn start() -> EtcdServer {
        for _ in 0..10 {
            let mut member = EtcdServer::new("m0", free_port(), free_port());
            member.initial_cluster = member.peer_entry();
            member.spawn();
            if member.await_ready(Duration::from_secs(15)) {
                return member;
            }
        }
        panic!("could not start etcd on free ports");
    }

    /// A single member whose clients must speak TLS and present a certificate signed by
    /// `pki`'s CA (`--client-cert-auth`).
    pub fn start_tls(pki: &super::tls::Pki) -> EtcdServer {
        for _ in 0..10 {
            let mut member = EtcdServer::new("m0", free_port(), free_port());
            member.initial_cluster = member.peer_entry();
            let files = [&pki.ca, &pki.server_cert, &pki.server_key];
            member.tls = Some(files.map(|f| f.to_path_buf()));
            member.spawn();
            if member.await_ready(Duration::from_secs(15)) {
                return member;
            }
        }
        panic!("could not start etcd with TLS on free ports");
    }

    fn new(name: &str, client_port: u16, peer_port: u16) -> EtcdServer {
        EtcdServer {
            name: name.to_string(),
            client_port,
            peer_port,
            initial_cluster: String::new(),
            // Short Raft timings lower the server's minimum lease TTL to one second; a
            // lone member never holds an election after its first, so they cost nothing.
            timings: (25, 250),
            tls: None,
            child: None,
            dir: tempfile::tempdir_in(data_parent()).expect("temp dir"),
        }
    }

    fn peer_entry(&self) -> String {
        format!("{}=http://127.0.0.1:{}", self.name, self.peer_port)
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Starts the member's process (a restart keeps its data directory).
    fn spawn(&mut self) {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let state = if self.dir.path().join("data").exists() {
            "existing"
        } else {
            "new"
        };
        let _ = std::fs::remove_file(self.log());
        let mut etcd = Command::new("etcd");
        if let Some([ca, cert, key]) = &self.tls {
            etcd.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(ca)
                .arg("--cert-file")
                .arg(cert)
                .arg("--key-file")
                .arg(key);
        }
        let child = etcd
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", state])
            // One token for the whole cluster: its list of members is unique to it.
            .args(["--initial-cluster-token", &self.initial_cluster])
            .args(["--heartbeat-interval", &self.timings.0.to_string()])
            .args(["--election-timeout", &self.timings.1.to_string()])
            .args(["--logger", "zap", "--log-outputs"])
            .arg(self.log())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start etcd (apt-get install etcd-server)");
        self.child = Some(child);
    }

    /// Waits until the member's log says it serves clients ("serving client traffic") and a request through Raft
    /// (`/health`) answers; false when it exited (a port was taken) or ran out of time.
    fn await_ready(&mut self, limit: Duration) -> bool {
        let pause = Duration::from_millis(10);
        let ready = super::poll(limit, pause, || {
            if super::exited(&mut self.child) {
                return Some(false);
            }
            let logged = std::fs::read_to_string(self.log())
                .is_ok_and(|l| l.contains("serving client traffic"));
            (logged && self.healthy()).then_some(true)
        });
        ready.unwrap_or_else(|| {
            self.kill();
            false
        })
    }

    /// True when `GET /health` answers `"health":"true"` (over TLS: `etcdctl endpoint
    /// health` with a client certificate).
    pub fn healthy(&self) -> bool {
        if let Some([ca, _, _]) = &self.tls {
            // The client certificate of `pki`, beside its CA.
            let dir = ca.parent().expect("the CA's directory");
            return self
                .etcdctl()
                .arg(format!("--endpoints=https://{}", self.endpoint()))
                .arg(format!("--cacert={}", ca.display()))
                .arg(format!("--cert={}", dir.join("client.pem").display()))
                .arg(format!("--key={}", dir.join("client.key").display()))
                .args(["endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        }
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.client_port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        let mut answer = String::new();
        s.write_all(req.as_bytes()).is_ok()
            && s.read_to_string(&mut answer).is_ok()
            && answer.contains("\"health\":\"true\"")
    }

    /// The last lines of the member's log, for a failure message.
    pub fn log_tail(&self) -> String {
        format!("\n{}: {}", self.name, super::log_tail(&self.log(), 3))
    }

    /// `127.0.0.1:PORT`, the client endpoint.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// `etcd://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoint())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the member (SIGKILL) and waits for it; its data directory stays.
    pub fn kill(&mut self) {
        super::kill(&mut self.child);
    }

    /// Starts the member again on the same ports with its data, and waits until it serves.
    pub fn restart(&mut self) {
        self.kill();
        let up = super::poll(Duration::from_secs(20), Duration::from_millis(100), || {
            self.spawn();
            self.await_ready(Duration::from_secs(10)).then_some(())
        });
        assert!(up.is_some(), "could not restart etcd member {}", self.name);
    }

    /// Freezes the member (SIGSTOP).
    pub fn pause(&self) {
        signal(self.pid().expect("etcd running"), "STOP");
    }

    /// Thaws a paused member (SIGCONT).
    pub fn resume(&self) {
        signal(self.pid().expect("etcd running"), "CONT");
    }

    /// An `etcdctl` command pointed at this member.
    pub fn etcdctl(&self) -> Command {
        let mut c = Command::new("etcdctl");
        c.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint()));
        c
    }

    /// Runs `etcdctl ARGS…` and returns its stdout, trimmed (panics when it fails).
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.etcdctl().args(args).output().expect("etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three members of one cluster, on free loopback ports.
pub struct EtcdCluster {
    pub members: Vec<EtcdServer>,
}

impl EtcdCluster {
    pub fn start() -> EtcdCluster {
        let mut last = String::new();
        for _ in 0..3 {
            let mut members: Vec<EtcdServer> = (0..3)
                .map(|i| EtcdServer::new(&format!("m{i}"), free_port(), free_port()))
                .collect();
            let all: Vec<String> = members.iter().map(EtcdServer::peer_entry).collect();
            for m in &mut members {
                m.initial_cluster = all.join(",");
                // etcd's defaults: members of a loaded machine must not depose each other.
                m.timings = (100, 1000);
                m.spawn();
            }
            let limit = Duration::from_secs(20);
            if members.iter_mut().all(|m| m.await_ready(limit)) {
                return EtcdCluster { members };
            }
            last = members.iter().map(EtcdServer::log_tail).collect();
        }
        panic!("could not start a 3-member etcd cluster on free ports: {last}");
    }

    /// `etcd://a,b,c` naming every member.
    pub fn url(&self) -> String {
        let eps: Vec<String> = self.members.iter().map(EtcdServer::endpoint).collect();
        format!("etcd://{}", eps.join(","))
    }
}

/// Sends `sig` (by name) to `pid`. (This module is also built into the bench, which has no
/// `support::processes`.)
fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}
