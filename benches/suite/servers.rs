//! The servers the suite measures against, on free loopback ports, each in a temporary
//! directory inside the suite's own and killed at the end (and by a parent-death signal if
//! the suite itself is killed). Redis comes from the test harness, which takes a server for
//! ready only once the server's own log says so.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::procs::{
    die_with_parent, interrupted, run, server_started, server_stopped, temp_dir, which, ROOT,
};
use crate::test_servers::{free_port, MemcachedServer, RedisCluster, RedisServer};

/// A redis-server with no persistence; killed on drop.
pub struct Redis(RedisServer);

impl Redis {
    pub fn start() -> Result<Redis, String> {
        Self::start_with(&[])
    }

    /// A server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Result<Redis, String> {
        if which("redis-server").is_none() {
            return Err("redis-server is not installed (apt-get install redis-server)".into());
        }
        let parent = ROOT.get().cloned().unwrap_or_else(std::env::temp_dir);
        let server = RedisServer::try_start_in(extra, &parent, |c| {
            die_with_parent(c);
        })?;
        server_started(server.pid().unwrap_or_default());
        Ok(Redis(server))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn port(&self) -> u16 {
        self.0.port
    }

    pub fn pid(&self) -> Option<u32> {
        self.0.pid()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(pid) = self.0.pid() {
            server_stopped(pid);
        }
    }
}

/// A master and one replica in sync with it, for `?min_replicas=1`; both killed on drop.
pub struct Replicated {
    master: Redis,
    _replica: Redis,
}

impl Replicated {
    pub fn start() -> Result<Replicated, String> {
        let master = Redis::start()?;
        let port = master.port().to_string();
        let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &port])?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !replica
            .0
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            if Instant::now() > deadline {
                return Err("the replica never synced with its master".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Replicated {
            master,
            _replica: replica,
        })
    }

    /// The master's URL with `?min_replicas=1`.
    pub fn url(&self) -> String {
        format!("{}?min_replicas=1", self.master.url())
    }
}

/// A Redis Cluster of six nodes (three masters, three replicas), from the test harness;
/// killed on drop.
pub struct Cluster(RedisCluster);

impl Cluster {
    pub fn start() -> Result<Cluster, String> {
        if which("redis-server").is_none() || which("redis-cli").is_none() {
            return Err("redis-server is not installed (apt-get install redis-server)".into());
        }
        let start = || {
            RedisCluster::start_with(|c| {
                die_with_parent(c);
            })
        };
        let cluster = std::panic::catch_unwind(start)
            .map_err(|_| "could not start a Redis Cluster".to_string())?;
        cluster
            .nodes
            .iter()
            .filter_map(|n| n.pid())
            .for_each(server_started);
        Ok(Cluster(cluster))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.0
            .nodes
            .iter()
            .filter_map(|n| n.pid())
            .for_each(server_stopped);
    }
}

/// A memcached on a free loopback port, from the test harness; killed on drop.
pub struct Memcached(MemcachedServer);

impl Memcached {
    pub fn start() -> Result<Memcached, String> {
        if which("memcached").is_none() {
            return Err("memcached is not installed (apt-get install memcached)".into());
        }
        let server = MemcachedServer::try_start(&[], |c| {
            die_with_parent(c);
        })?;
        server_started(server.pid().unwrap_or_default());
        Ok(Memcached(server))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        if let Some(pid) = self.0.pid() {
            server_stopped(pid);
        }
    }
}

/// A one-member etcd on free loopback ports with a temporary data dir; killed on drop.
pub struct EtcdServer {
    pub endpoint: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl EtcdServer {
    pub fn start() -> Result<EtcdServer, String> {
        if which("etcd").is_none() || which("etcdctl").is_none() {
            return Err(
                "etcd/etcdctl not installed (apt-get install etcd-server etcd-client)".into(),
            );
        }
        for _ in 0..5 {
            let dir = temp_dir()?;
            let (client, peer) = (free_port(), free_port());
            let endpoint = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let mut child = die_with_parent(
                Command::new("etcd")
                    .args(["--name", "bench", "--data-dir"])
                    .arg(dir.path().join("data"))
                    .args(["--listen-client-urls", &endpoint])
                    .args(["--advertise-client-urls", &endpoint])
                    .args(["--listen-peer-urls", &peer_url])
                    .args(["--initial-advertise-peer-urls", &peer_url])
                    .args(["--initial-cluster", &format!("bench={peer_url}")])
                    .args(["--initial-cluster-state", "new"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline && !interrupted() {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(("127.0.0.1", client)).is_ok()
                    && run(
                        etcdctl(&endpoint).args(["put", "bench-ready", "1"]),
                        Duration::from_secs(5),
                    )
                    .is_ok_and(|(_, s)| s.success())
                {
                    server_started(child.id());
                    return Ok(EtcdServer {
                        endpoint,
                        child,
                        _dir: dir,
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err("could not start etcd on free ports".into())
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        server_stopped(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn etcdctl(endpoint: &str) -> Command {
    let mut c = Command::new("etcdctl");
    c.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"));
    c
}
