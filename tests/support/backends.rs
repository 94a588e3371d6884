//! What each backend of the matrix in `macros.rs` stands for: where a CLI test keeps its
//! locks ([`Store`], one constructor per CLI backend) and how the conformance suite opens
//! it ([`factory`], one function per backend).

use std::process::Command;

use super::{dlock, RedisServer};

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

    /// Whether `key` is held, as `dlock status KEY` says (exit 0).
    pub fn held(&self, key: &str) -> bool {
        let out = self.dlock().args(["status", key]).output().unwrap();
        out.status.code() == Some(0)
    }

    /// The Redis server, for fault injection.
    pub fn server(&mut self) -> &mut RedisServer {
        match self {
            Store::Redis(s) => s,
            Store::Local(_) | Store::Redlock(_) => panic!("not a single Redis store"),
        }
    }
}

/// One conformance factory per backend: an async fn returning a fresh backend and a guard
/// that keeps whatever it needs alive (a temporary directory, a redis-server).
pub mod factory {
    use std::any::Any;
    use std::sync::Arc;

    use dlock::backend::local::LocalBackend;
    use dlock::backend::Backend;

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
    pub async fn redis() -> (Arc<dyn Backend>, Guard) {
        let server = RedisServer::start();
        let backend = dlock::backend::redis::RedisBackend::connect(&server.url())
            .await
            .expect("connect to redis");
        (Arc::new(backend), Box::new(server))
    }

    /// Redlock over three Redis servers on free ports.
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
        let spec = dlock::backend::BackendSpec::from_urls(&[server.url()]).expect("etcd URL");
        let backend = dlock::backend::open(&spec).await.expect("connect to etcd");
        (backend, Box::new(server))
    }

    /// The in-memory reference store, opened through the scheme table as a user's URL would be
    /// (a fresh name per test: stores are shared by name within the process).
    pub async fn memory() -> (Arc<dyn Backend>, Guard) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let url = format!("memory://conformance-{n}");
        let spec = dlock::backend::BackendSpec::from_urls(&[url]).expect("memory URL");
        let backend = dlock::backend::open(&spec)
            .await
            .expect("open memory store");
        (backend, Box::new(()))
    }
}
