//! The dlock benchmark suite: `cargo bench --bench suite [-- OPTIONS]` (see `--help`).
//!
//! Measures dlock side by side with its peers, on this machine and in this run: flock(1),
//! `etcdctl lock` against an etcd started here, `redis-cli PING` and `redis-benchmark`.
//! Every server is started on free loopback ports with its own temporary directory and is
//! killed at the end (Drop guards, plus a parent-death signal in case the suite itself is
//! killed). A measurement that fails prints `n/a (error: …)` and the suite goes on.
//!
//! Results: one table per section on stdout, a summary of the targets, and JSON in
//! `target/<triple>/bench/results.json` plus a timestamped copy, so that runs can be compared (the
//! targets table shows the previous `results.json` figure next to the new one).
//!
//! `opts` parses the options, `sections/` measures (each section returns its rows), `report`
//! prints and writes them; `procs` runs and watches child processes, `servers` starts Redis
//! (through the test harness's servers, `test_servers`) and etcd.

mod opts;
mod procs;
mod report;
mod sections;
mod servers;
// Not every server the tests use is benchmarked.
#[allow(dead_code, unused_imports)]
#[path = "../../tests/support/servers/mod.rs"]
mod test_servers;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use dlock::backend::spec::BackendSpec;

use crate::opts::Opts;
use crate::procs::{handle_signals, interrupted, ROOT};
use crate::report::{Report, Section};
use crate::servers::{Cluster, EtcdServer, Memcached, Redis, Replicated};

/// Where a `dlock` command or the library keeps its locks.
#[derive(Clone)]
pub enum Store {
    Local(PathBuf),
    Redis(String),
    /// A `redis+cluster://` URL.
    RedisCluster(String),
    Memcached(String),
    Zookeeper(String),
    /// An `etcd://` URL.
    Etcd(String),
    Postgres(String),
    /// A majority quorum: its label (`redlock`, `memcached quorum`) and its URLs.
    Quorum(&'static str, Vec<String>),
    Mysql(String),
}

impl Store {
    pub fn label(&self) -> &'static str {
        match self {
            Store::Local(_) => "local",
            Store::Redis(_) => "redis",
            Store::RedisCluster(_) => "redis-cluster",
            Store::Memcached(_) => "memcached",
            Store::Zookeeper(_) => "zookeeper",
            Store::Etcd(_) => "etcd",
            Store::Postgres(_) => "postgres",
            Store::Quorum(label, _) => label,
            Store::Mysql(_) => "mysql",
        }
    }

    pub fn spec(&self) -> BackendSpec {
        let read = |urls: &[String]| BackendSpec::from_urls(urls).expect("a bench store's URL");
        match self {
            Store::Local(dir) => BackendSpec::Local(dir.clone()),
            Store::Redis(url)
            | Store::RedisCluster(url)
            | Store::Memcached(url)
            | Store::Zookeeper(url)
            | Store::Etcd(url)
            | Store::Postgres(url)
            | Store::Mysql(url) => read(std::slice::from_ref(url)),
            Store::Quorum(_, urls) => read(urls),
        }
    }
}

/// What the sections share: the options, the binary, the runtime, the servers.
pub struct Ctx {
    pub o: Opts,
    pub dlock: PathBuf,
    tmp: tempfile::TempDir,
    pub rt: tokio::runtime::Runtime,
    redis: Option<Result<Redis, String>>,
    redis_cluster: Option<Result<Cluster, String>>,
    /// A master and its replica, for `?min_replicas=1`.
    redis_replicated: Option<Result<Replicated, String>>,
    etcd: Option<Result<EtcdServer, String>>,
    memcached: Option<Result<Memcached, String>>,
    /// Three Redis servers (Redlock) and three memcached servers (a memcached quorum).
    redlock: Option<Result<Vec<Redis>, String>>,
    memcached_quorum: Option<Result<Vec<Memcached>, String>>,
    zookeeper: Option<Result<test_servers::ZkServer, String>>,
    postgres: Option<Result<test_servers::PostgresServer, String>>,
    mysql: Option<Result<test_servers::MysqlServer, String>>,
}

impl Ctx {
    /// `Err` for a store left out by `--stores`: its rows say so instead of a figure.
    fn selected(&self, store: &str) -> Result<(), String> {
        match self.o.wants_store(store) {
            true => Ok(()),
            false => Err("not selected (--stores)".into()),
        }
    }

    /// The Redis server shared by the sections (started on first use).
    pub fn redis(&mut self) -> Result<Store, String> {
        self.selected("redis")?;
        let r = self.redis.get_or_insert_with(Redis::start);
        r.as_ref()
            .map(|s| Store::Redis(s.url()))
            .map_err(Clone::clone)
    }

    /// The Redis Cluster shared by the sections (started on first use).
    pub fn redis_cluster(&mut self) -> Result<Store, String> {
        self.selected("redis-cluster")?;
        let c = self.redis_cluster.get_or_insert_with(Cluster::start);
        c.as_ref()
            .map(|c| Store::RedisCluster(c.url()))
            .map_err(Clone::clone)
    }

    /// A master with one replica, its URL asking for `?min_replicas=1` (started on first
    /// use).
    pub fn redis_replicated(&mut self) -> Result<Store, String> {
        self.selected("redis")?;
        let r = self.redis_replicated.get_or_insert_with(Replicated::start);
        r.as_ref()
            .map(|r| Store::Redis(r.url()))
            .map_err(Clone::clone)
    }

    pub fn redis_pid(&self) -> Option<u32> {
        self.redis.as_ref()?.as_ref().ok()?.pid()
    }

    pub fn redis_port(&mut self) -> Result<u16, String> {
        self.redis()?;
        Ok(self
            .redis
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .map_or(0, Redis::port))
    }

    /// The memcached server shared by the sections (started on first use).
    pub fn memcached(&mut self) -> Result<Store, String> {
        self.selected("memcached")?;
        let m = self.memcached.get_or_insert_with(Memcached::start);
        m.as_ref()
            .map(|s| Store::Memcached(s.url()))
            .map_err(Clone::clone)
    }

    /// Redlock over three Redis servers of its own (started on first use).
    pub fn redlock(&mut self) -> Result<Store, String> {
        self.selected("redlock")?;
        let r = self
            .redlock
            .get_or_insert_with(|| (0..3).map(|_| Redis::start()).collect());
        let urls = r.as_ref().map_err(Clone::clone)?;
        Ok(Store::Quorum(
            "redlock",
            urls.iter().map(Redis::url).collect(),
        ))
    }

    /// A quorum of three memcached servers of its own (started on first use).
    pub fn memcached_quorum(&mut self) -> Result<Store, String> {
        self.selected("memcached")?;
        let m = self
            .memcached_quorum
            .get_or_insert_with(|| (0..3).map(|_| Memcached::start()).collect());
        let urls = m.as_ref().map_err(Clone::clone)?;
        let urls = urls.iter().map(Memcached::url).collect();
        Ok(Store::Quorum("memcached quorum", urls))
    }

    /// The PostgreSQL server shared by the sections (started on first use), and its port.
    pub fn postgres(&mut self) -> Result<(Store, u16), String> {
        self.selected("postgres")?;
        let p = self.postgres.get_or_insert_with(|| {
            if !test_servers::pg_bin("initdb").exists() {
                return Err("PostgreSQL is not installed (apt-get install postgresql)".into());
            }
            Ok(test_servers::PostgresServer::start())
        });
        p.as_ref()
            .map(|s| (Store::Postgres(s.url()), s.port))
            .map_err(Clone::clone)
    }

    /// The MariaDB server shared by the sections (started on first use), and its port.
    pub fn mysql(&mut self) -> Result<(Store, u16), String> {
        self.selected("mysql")?;
        let m = self.mysql.get_or_insert_with(|| {
            let installed = Path::new("/usr/sbin/mariadbd").exists()
                || crate::procs::which("mariadbd").is_some();
            if !installed || crate::procs::which("mariadb-install-db").is_none() {
                return Err("MariaDB is not installed (apt-get install mariadb-server)".into());
            }
            Ok(test_servers::MysqlServer::start())
        });
        m.as_ref()
            .map(|s| (Store::Mysql(s.url()), s.port))
            .map_err(Clone::clone)
    }

    /// The etcd endpoint (started on first use).
    pub fn etcd(&mut self) -> Result<String, String> {
        self.selected("etcd")?;
        let e = self.etcd.get_or_insert_with(EtcdServer::start);
        e.as_ref().map(|s| s.endpoint.clone()).map_err(Clone::clone)
    }

    /// The ZooKeeper server (started on first use, by the tests' harness).
    pub fn zookeeper(&mut self) -> Result<Store, String> {
        self.selected("zookeeper")?;
        let z = self.zookeeper.get_or_insert_with(|| {
            let jar = std::path::Path::new(test_servers::ZOOKEEPER_JAR);
            if crate::procs::which("java").is_none() || !jar.exists() {
                return Err("ZooKeeper is not installed (apt-get install zookeeper)".into());
            }
            std::panic::catch_unwind(test_servers::ZkServer::start)
                .map_err(|_| "could not start ZooKeeper".to_string())
        });
        z.as_ref()
            .map(|s| Store::Zookeeper(s.url()))
            .map_err(Clone::clone)
    }

    /// The etcd server as a dlock store (started on first use).
    pub fn etcd_store(&mut self) -> Result<Store, String> {
        let ep = self.etcd()?;
        Ok(Store::Etcd(ep.replacen("http://", "etcd://", 1)))
    }

    /// A fresh local store directory.
    pub fn local(&self, name: &str) -> Store {
        let dir = self.tmp.path().join(format!("store-{name}"));
        let _ = std::fs::create_dir_all(&dir);
        Store::Local(dir)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// This binary, then the `--baseline` one if given: how their rows start, and the path.
    pub fn binaries(&self) -> Vec<(&'static str, PathBuf)> {
        let mut bins = vec![("dlock", self.dlock.clone())];
        bins.extend(self.o.baseline.clone().map(|b| (sections::BASELINE, b)));
        bins
    }

    /// A `dlock` command pointed at `store`, with none of the caller's dlock variables.
    pub fn dlock(&self, store: &Store) -> Command {
        dlock_cmd(&self.dlock, store)
    }
}

/// [`Ctx::dlock`] with another binary.
pub fn dlock_cmd(bin: &Path, store: &Store) -> Command {
    let mut c = Command::new(bin);
    for v in dlock::env::INHERITED {
        c.env_remove(v);
    }
    match store {
        Store::Local(dir) => c.env("DLOCK_DIR", dir),
        Store::Redis(url)
        | Store::RedisCluster(url)
        | Store::Memcached(url)
        | Store::Zookeeper(url)
        | Store::Etcd(url)
        | Store::Postgres(url)
        | Store::Mysql(url) => c.env("DLOCK_URL", url),
        Store::Quorum(_, urls) => c.env("DLOCK_URL", urls.join(",")),
    };
    c
}

fn main() {
    let code = suite(Opts::parse());
    std::process::exit(code);
}

type Measure = fn(&mut Ctx) -> Section;

const SECTIONS: [(&str, Measure); 9] = [
    ("exec", sections::exec::measure),
    ("contention", sections::contention::measure),
    ("handoff", sections::handoff::measure),
    ("throughput", sections::throughput::measure),
    ("rss", sections::rss::measure),
    ("status", sections::status::measure),
    ("wait", sections::wait::measure),
    ("applock", sections::applock::measure),
    ("elect", sections::elect::measure),
];

fn suite(o: Opts) -> i32 {
    let mut report = Report::new();
    let dlock = PathBuf::from(env!("CARGO_BIN_EXE_dlock"));
    // target/<triple>/release/dlock → target/<triple>/bench
    let out_dir = o.out.clone().unwrap_or_else(|| {
        dlock
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
            .join("bench")
    });
    let mut ctx = match context(o, dlock) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("suite: {e}");
            return 70;
        }
    };
    for (name, measure) in SECTIONS {
        if ctx.o.wants(name) && !interrupted() {
            let t = Instant::now();
            let section = measure(&mut ctx);
            report.add(name, section, t.elapsed());
        }
    }
    report.finish(ctx.o.json(), &out_dir);
    drop(ctx); // servers killed, temp dirs removed
    if interrupted() {
        130
    } else {
        0
    }
}

/// The runtime and the temporary directory; prints the run's first line.
fn context(o: Opts, dlock: PathBuf) -> Result<Ctx, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let tmp = tempfile::Builder::new()
        .prefix("dlock-bench-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    if let Some(b) = o.baseline.as_ref().filter(|b| !b.is_file()) {
        return Err(format!("--baseline {}: no such file", b.display()));
    }
    let _ = ROOT.set(tmp.path().to_path_buf());
    handle_signals();
    println!(
        "dlock benchmark suite{}: sections {}; binary {}{}",
        if o.quick { " (--quick)" } else { "" },
        o.only.join(","),
        dlock.display(),
        o.baseline
            .as_ref()
            .map_or(String::new(), |b| format!("; baseline {}", b.display()))
    );
    Ok(Ctx {
        o,
        dlock,
        tmp,
        rt,
        redis: None,
        redis_cluster: None,
        redis_replicated: None,
        etcd: None,
        memcached: None,
        redlock: None,
        memcached_quorum: None,
        zookeeper: None,
        postgres: None,
        mysql: None,
    })
}
