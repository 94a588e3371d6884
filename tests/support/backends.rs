//! What each backend of the matrix in `macros.rs` stands for: where a CLI test keeps its
//! locks ([`Store`], one constructor per CLI backend) and how the conformance suite opens
//! it ([`factory`], one function per backend).

use std::process::Command;

use crate::macros::{caps, Caps};

use super::{
    dlock, EtcdServer, MemcachedServer, MysqlServer, PostgresServer, RedisCluster, RedisServer,
    Server, ZkServer, MY_PASSWORD, PG_PASSWORD,
};

/// Where a CLI test keeps its locks: a fresh local store directory, a fresh Redis server,
/// three fresh Redis servers (Redlock), or a fresh single-member etcd.
pub enum Store {
    Local(tempfile::TempDir),
    Redis(RedisServer),
    RedisCluster(RedisCluster),
    Redlock(Vec<RedisServer>),
    Etcd(EtcdServer),
    Memcached(MemcachedServer),
    /// Three memcached servers as a majority quorum.
    MemcachedQuorum(Vec<MemcachedServer>),
    Zookeeper(ZkServer),
    Postgres(PostgresServer),
    Mysql(MysqlServer),
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

    /// A new Redis Cluster (three masters, three replicas).
    pub fn redis_cluster() -> Store {
        Store::RedisCluster(RedisCluster::start())
    }

    /// Three new redis-servers, used as a Redlock quorum.
    pub fn redlock() -> Store {
        Store::Redlock((0..3).map(|_| RedisServer::start()).collect())
    }

    /// A new single-member etcd.
    pub fn etcd() -> Store {
        Store::Etcd(EtcdServer::start())
    }

    /// A new memcached.
    pub fn memcached() -> Store {
        Store::Memcached(MemcachedServer::start())
    }

    /// Three new memcached servers, used as a quorum.
    pub fn memcached_quorum() -> Store {
        Store::MemcachedQuorum((0..3).map(|_| MemcachedServer::start()).collect())
    }

    /// A new standalone ZooKeeper server.
    pub fn zookeeper() -> Store {
        Store::Zookeeper(ZkServer::start())
    }

    /// A new PostgreSQL server.
    pub fn postgres() -> Store {
        Store::Postgres(PostgresServer::start())
    }

    /// A new MariaDB server.
    pub fn mysql() -> Store {
        Store::Mysql(MysqlServer::start())
    }

    /// A `dlock` command pointed at this store (through the environment, as users do).
    pub fn dlock(&self) -> Command {
        let mut c = dlock();
        match self {
            Store::Local(dir) => c.env("DLOCK_DIR", dir.path()),
            _ => c.env("DLOCK_URL", self.dlock_url()),
        };
        c
    }

    /// What `DLOCK_URL` says for this store (comma-separated for a quorum); the local
    /// store's directory as a `file://` URL.
    pub fn dlock_url(&self) -> String {
        fn joined<S: Server>(servers: &[S]) -> String {
            let urls: Vec<String> = servers.iter().map(Server::url).collect();
            urls.join(",")
        }
        match self {
            Store::Local(dir) => format!("file://{}", dir.path().display()),
            Store::Redis(server) => server.url(),
            Store::RedisCluster(cluster) => cluster.url(),
            Store::Redlock(servers) => joined(servers),
            Store::Etcd(server) => server.url(),
            Store::Memcached(server) => server.url(),
            Store::MemcachedQuorum(servers) => joined(servers),
            Store::Zookeeper(server) => server.url(),
            Store::Postgres(server) => server.url(),
            Store::Mysql(server) => server.url(),
        }
    }

    /// `sh -c SCRIPT` with the same environment as [`Store::dlock`], for scripts that call
    /// dlock themselves (through [`dlock_bin`]).
    pub fn shell(&self, script: &str) -> Command {
        super::loops::shell(&self.dlock(), script)
    }

    /// What this store does beyond what every store does ([`caps`]).
    pub fn caps(&self) -> Caps {
        match self {
            Store::Local(_) => caps::local(),
            Store::Redis(_) => caps::redis(),
            Store::RedisCluster(_) => caps::redis_cluster(),
            Store::Redlock(_) => caps::redlock(),
            Store::Etcd(_) => caps::etcd(),
            Store::Memcached(_) => caps::memcached(),
            Store::MemcachedQuorum(_) => caps::memcached_quorum(),
            Store::Zookeeper(_) => caps::zookeeper(),
            Store::Postgres(_) => caps::postgres(),
            Store::Mysql(_) => caps::mysql(),
        }
    }

    /// The unit this store's TTLs are counted in ([`ttl_unit`]).
    pub fn ttl_unit(&self) -> std::time::Duration {
        match self {
            Store::Local(_) => ttl_unit::local(),
            Store::Redis(_) => ttl_unit::redis(),
            Store::RedisCluster(_) => ttl_unit::redis_cluster(),
            Store::Redlock(_) => ttl_unit::redlock(),
            Store::Etcd(_) => ttl_unit::etcd(),
            Store::Memcached(_) => ttl_unit::memcached(),
            Store::MemcachedQuorum(_) => ttl_unit::memcached_quorum(),
            Store::Zookeeper(_) => ttl_unit::zookeeper(),
            Store::Postgres(_) => ttl_unit::postgres(),
            Store::Mysql(_) => ttl_unit::mysql(),
        }
    }

    /// Whether `key` is held, as `dlock status KEY --json` says: held is exit 0 with
    /// `"held":true`, free is exit 1 with `"held":false`. Anything else (a usage error, an
    /// unreachable store, an answer that does not parse) fails the test with dlock's stderr:
    /// a `status` that fails is no evidence that the key is free.
    pub fn held(&self, key: &str) -> bool {
        let out = self
            .dlock()
            .args(["status", key, "--json"])
            .output()
            .unwrap();
        let held = match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            _ => panic!(
                "dlock status {key} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        };
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("dlock status {key} --json: {e}: {out:?}"));
        assert_eq!(
            answer["key"], key,
            "status answered for another key: {out:?}"
        );
        assert_eq!(
            answer["held"].as_bool(),
            Some(held),
            "the exit code and the answer of status {key} disagree: {out:?}"
        );
        held
    }

    /// How many times longer a test must make its times so that its shortest lease,
    /// `shortest`, is one this store accepts: memcached counts TTLs in whole seconds, three
    /// at least. 1 elsewhere.
    pub fn slowdown(&self, shortest: std::time::Duration) -> u32 {
        match self {
            Store::Memcached(_) | Store::MemcachedQuorum(_) => {
                3000u128.div_ceil(shortest.as_millis()).max(1) as u32
            }
            _ => 1,
        }
    }

    /// Freezes (SIGSTOP, `on`) or thaws (SIGCONT) every server of the store; false, with
    /// nothing done, where [`Store::servers`] has none (the local store, a Redis Cluster).
    pub fn freeze(&mut self, on: bool) -> bool {
        let servers = self.servers();
        for s in &servers {
            if on {
                s.pause()
            } else {
                s.resume()
            }
        }
        !servers.is_empty()
    }

    /// Every server this store's locks live on, for the fault matrix (`faults.rs`): a
    /// quorum's servers all, so that the quorum is lost. None for the local store; a Redis
    /// Cluster's nodes fail one at a time, in `redis_cluster.rs`.
    pub fn servers(&mut self) -> Vec<&mut dyn Server> {
        fn all<S: Server>(servers: &mut [S]) -> Vec<&mut dyn Server> {
            servers.iter_mut().map(|s| s as &mut dyn Server).collect()
        }
        match self {
            Store::Local(_) | Store::RedisCluster(_) => Vec::new(),
            Store::Redis(s) => vec![s],
            Store::Redlock(servers) => all(servers),
            Store::Etcd(s) => vec![s],
            Store::Memcached(s) => vec![s],
            Store::MemcachedQuorum(servers) => all(servers),
            Store::Zookeeper(s) => vec![s],
            Store::Postgres(s) => vec![s],
            Store::Mysql(s) => vec![s],
        }
    }

    /// The password in this store's URL, which no output may show.
    pub fn password(&self) -> Option<&'static str> {
        match self {
            Store::Postgres(_) => Some(PG_PASSWORD),
            Store::Mysql(_) => Some(MY_PASSWORD),
            _ => None,
        }
    }

    /// When `key`'s lease expires as its server keeps it (ms since the Unix epoch), where
    /// the server says so on our clock: Redis (`PEXPIRETIME`), PostgreSQL and MariaDB.
    pub fn lease_expiry_ms(&mut self, key: &str) -> Option<u64> {
        match self {
            Store::Redis(s) => Some(s.expiry_ms(&format!("dlock:{{{key}}}:lease"))),
            Store::Postgres(s) => {
                let q = format!("SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM dlock_locks WHERE key = '{key}'");
                s.psql(&q).parse().ok()
            }
            Store::Mysql(s) => {
                let q = format!("SELECT expires_at FROM dlock_locks WHERE lock_key = '{key}'");
                s.sql(&q).parse().ok()
            }
            _ => None,
        }
    }

    /// The Redis server, for fault injection.
    pub fn server(&mut self) -> &mut RedisServer {
        match self {
            Store::Redis(s) => s,
            _ => panic!("not a single Redis store"),
        }
    }
}

impl Store {
    /// Holds `key` with `ttl` (`exec … sleep 60`); returns dlock and the command's pid.
    pub fn hold(&self, key: &str, ttl: &str, dir: &std::path::Path) -> (std::process::Child, u32) {
        super::hold_with(self.dlock(), key, &["--ttl", ttl], "exec sleep 60", dir)
    }

    /// `dlock lock KEY --ttl TTL --json`'s owner and fencing token.
    pub fn lock_token(&self, key: &str, ttl: &str) -> (String, u64) {
        let out = self
            .dlock()
            .args(["lock", key, "--ttl", ttl, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let owner = v["owner"].as_str().unwrap().to_string();
        (owner, v["fencing_token"].as_u64().unwrap())
    }

    /// The PostgreSQL server, for fault injection.
    pub fn pg(&mut self) -> &mut PostgresServer {
        match self {
            Store::Postgres(s) => s,
            _ => panic!("not a PostgreSQL store"),
        }
    }

    /// The MariaDB server, for fault injection.
    pub fn my(&mut self) -> &mut MysqlServer {
        match self {
            Store::Mysql(s) => s,
            _ => panic!("not a MySQL store"),
        }
    }
}

/// The TTL unit of each backend, which tests count their TTLs in: a tenth of a second where
/// leases have millisecond TTLs; a second on etcd and memcached, whose leases are whole seconds, and on ZooKeeper.
pub mod ttl_unit {
    use std::time::Duration;

    const TENTH: Duration = Duration::from_millis(100);

    pub fn local() -> Duration {
        TENTH
    }

    pub fn redis() -> Duration {
        TENTH
    }

    pub fn redis_cluster() -> Duration {
        TENTH
    }

    pub fn redlock() -> Duration {
        TENTH
    }

    pub fn etcd() -> Duration {
        Duration::from_secs(1)
    }

    pub fn memory() -> Duration {
        TENTH
    }

    pub fn postgres() -> Duration {
        TENTH
    }

    pub fn mysql() -> Duration {
        TENTH
    }

    /// Whole seconds, and items may expire a second early: three at least.
    pub fn memcached() -> Duration {
        Duration::from_secs(1)
    }

    pub fn memcached_quorum() -> Duration {
        Duration::from_secs(1)
    }

    /// Sessions and TTL nodes: sub-second ones are at the mercy of a loaded JVM.
    pub fn zookeeper() -> Duration {
        Duration::from_secs(1)
    }
}

/// One conformance factory per backend: an async fn returning a fresh backend and a guard
/// that keeps whatever it needs alive (a temporary directory, a redis-server).
pub mod factory {
    use std::any::Any;
    use std::sync::Arc;

    use dlock::backend::local::LocalBackend;
    use dlock::backend::Backend;

    #[cfg(feature = "redis")]
    use crate::support::RedisServer;

    /// Keeps a backend's resources alive for the duration of a test.
    pub type Guard = Box<dyn Any + Send>;

    /// The embedded local store, in a fresh temporary directory.
    pub async fn local() -> (Arc<dyn Backend>, Guard) {
        let dir = tempfile::tempdir().expect("temp dir");
        let backend = LocalBackend::open(dir.path()).expect("open local store");
        (Arc::new(backend), Box::new(dir))
    }

    /// A single Redis server on a free port.
    #[cfg(feature = "redis")]
    pub async fn redis() -> (Arc<dyn Backend>, Guard) {
        let server = RedisServer::start();
        let backend = dlock::backend::redis::RedisBackend::connect(&server.url())
            .await
            .expect("connect to redis");
        (Arc::new(backend), Box::new(server))
    }

    /// A Redis Cluster of six nodes on free ports, opened through the scheme table.
    pub async fn redis_cluster() -> (Arc<dyn Backend>, Guard) {
        let cluster = tokio::task::spawn_blocking(crate::support::RedisCluster::start)
            .await
            .expect("start a Redis Cluster");
        let spec =
            dlock::backend::spec::BackendSpec::from_urls(&[cluster.url()]).expect("cluster URL");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("connect to the cluster");
        (backend, Box::new(cluster))
    }

    /// Redlock over three Redis servers on free ports.
    #[cfg(feature = "redis")]
    pub async fn redlock() -> (Arc<dyn Backend>, Guard) {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
        let backend = dlock::backend::redlock::RedlockBackend::connect(&urls)
            .await
            .expect("connect to the redis servers");
        (Arc::new(backend), Box::new(servers))
    }

    /// A single etcd member on free ports, opened through the scheme table.
    pub async fn etcd() -> (Arc<dyn Backend>, Guard) {
        let server = crate::support::EtcdServer::start();
        let spec = dlock::backend::spec::BackendSpec::from_urls(&[server.url()]).expect("etcd URL");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("connect to etcd");
        (backend, Box::new(server))
    }

    /// A memcached on a free port, opened through the scheme table.
    pub async fn memcached() -> (Arc<dyn Backend>, Guard) {
        let server = crate::support::MemcachedServer::start();
        let spec =
            dlock::backend::spec::BackendSpec::from_urls(&[server.url()]).expect("memcached URL");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("open memcached");
        (backend, Box::new(server))
    }

    /// Three memcached servers on free ports as a quorum, opened through the scheme table.
    pub async fn memcached_quorum() -> (Arc<dyn Backend>, Guard) {
        let servers: Vec<_> = (0..3)
            .map(|_| crate::support::MemcachedServer::start())
            .collect();
        let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
        let spec = dlock::backend::spec::BackendSpec::from_urls(&urls).expect("memcached URLs");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("open the memcached quorum");
        (backend, Box::new(servers))
    }

    /// A standalone ZooKeeper server on a free port, opened through the scheme table.
    pub async fn zookeeper() -> (Arc<dyn Backend>, Guard) {
        let server = crate::support::ZkServer::start();
        let spec = dlock::backend::spec::BackendSpec::from_urls(&[server.url()]).expect("zk URL");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("connect to ZooKeeper");
        (backend, Box::new(server))
    }

    /// A PostgreSQL server on a free port, opened through the scheme table.
    pub async fn postgres() -> (Arc<dyn Backend>, Guard) {
        let server = crate::support::PostgresServer::start();
        let spec =
            dlock::backend::spec::BackendSpec::from_urls(&[server.url()]).expect("postgres URL");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("connect to postgres");
        (backend, Box::new(server))
    }

    /// A MariaDB server on a free port, opened through the scheme table.
    pub async fn mysql() -> (Arc<dyn Backend>, Guard) {
        let server = crate::support::MysqlServer::start();
        let spec =
            dlock::backend::spec::BackendSpec::from_urls(&[server.url()]).expect("mysql URL");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("connect to mysql");
        (backend, Box::new(server))
    }

    /// The in-memory reference store, opened through the scheme table as a user's URL would be
    /// (a fresh name per test: stores are shared by name within the process).
    pub async fn memory() -> (Arc<dyn Backend>, Guard) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let url = format!("memory://conformance-{n}");
        let spec = dlock::backend::spec::BackendSpec::from_urls(&[url]).expect("memory URL");
        let backend = dlock::backend::spec::open(&spec)
            .await
            .expect("open memory store");
        (backend, Box::new(()))
    }
}
