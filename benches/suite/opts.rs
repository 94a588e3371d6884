//! The suite's options: `cargo bench --bench suite -- --help`.

use std::path::PathBuf;

use clap::Parser;
use serde_json::{json, Value};

pub const SECTIONS: [&str; 9] = [
    "exec",
    "contention",
    "handoff",
    "throughput",
    "rss",
    "status",
    "wait",
    "applock",
    "elect",
];

/// The dlock benchmark suite: dlock measured side by side with flock(1), etcdctl lock,
/// redis-cli and redis-benchmark, on this machine and in this run.
#[derive(Debug, Parser)]
#[command(
    name = "suite",
    override_usage = "cargo bench --bench suite [-- OPTIONS]",
    disable_version_flag = true
)]
struct Args {
    /// Scaled-down run (about a minute).
    #[arg(long)]
    quick: bool,

    /// Comma-separated sections: exec,contention,handoff,throughput,rss,status,wait,applock,
    /// elect.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = section)]
    only: Option<Vec<String>>,

    /// Comma-separated stores to start and measure (redis, redis-cluster, memcached, redlock,
    /// postgres, mysql, etcd, zookeeper); flock and the local store always run. Default: all.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = store)]
    stores: Option<Vec<String>>,

    /// Exec overhead: runs per command (default 200; etcdctl gets N/4). Election takeover:
    /// rounds per store (at most 20 after a clean exit, 5 after a SIGKILL).
    #[arg(long, value_name = "N", value_parser = number)]
    runs: Option<usize>,

    /// Contention: lock cycles per configuration, split over the N processes (480).
    #[arg(long, value_name = "N", value_parser = number)]
    cycles: Option<usize>,

    /// Hand-off: hand-offs per configuration (200).
    #[arg(long, value_name = "N", value_parser = number)]
    iters: Option<usize>,

    /// Throughput: seconds per configuration (3).
    #[arg(long, value_name = "S", value_parser = seconds)]
    secs: Option<f64>,

    /// Throughput: redis-benchmark requests (100000).
    #[arg(long, value_name = "N", value_parser = number)]
    requests: Option<usize>,

    /// Status: held locks to list (100000).
    #[arg(long, value_name = "N", value_parser = number)]
    locks: Option<usize>,

    /// Where to write results.json (default: bench/ beside the release directory).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Another dlock binary (an older build) measured beside this one, in the same rounds:
    /// rows `dlock (baseline) …` on the local store and Redis in exec, rss and status, on
    /// every store in contention, and their ratios (this / baseline). Hand-off and throughput go through the
    /// library, not the binary, and are not compared.
    #[arg(long, value_name = "PATH")]
    baseline: Option<PathBuf>,

    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The options, with the defaults of a full or a `--quick` run filled in.
pub struct Opts {
    pub quick: bool,
    pub only: Vec<String>,
    /// `None`: every store.
    pub stores: Option<Vec<String>>,
    pub runs: usize,
    pub cycles: usize,
    pub iters: usize,
    pub secs: f64,
    pub requests: usize,
    pub locks: usize,
    pub out: Option<PathBuf>,
    pub baseline: Option<PathBuf>,
}

impl Opts {
    /// Parses the command line; `--help` and errors exit here, as clap does.
    pub fn parse() -> Opts {
        let a = Args::parse();
        let quick = a.quick;
        let only = a
            .only
            .map(|only| only.into_iter().filter(|s| !s.is_empty()).collect());
        Opts {
            quick,
            only: only.unwrap_or_else(|| SECTIONS.iter().map(|s| s.to_string()).collect()),
            stores: a.stores,
            runs: a.runs.unwrap_or(if quick { 40 } else { 200 }),
            cycles: a.cycles.unwrap_or(if quick { 96 } else { 480 }),
            iters: a.iters.unwrap_or(if quick { 50 } else { 200 }),
            secs: a.secs.unwrap_or(if quick { 1.0 } else { 3.0 }),
            requests: a.requests.unwrap_or(if quick { 20_000 } else { 100_000 }),
            locks: a.locks.unwrap_or(if quick { 10_000 } else { 100_000 }),
            out: a.out,
            baseline: a.baseline,
        }
    }

    pub fn wants(&self, section: &str) -> bool {
        self.only.iter().any(|s| s == section)
    }

    /// True when `store` is to be started and measured (see `--stores`).
    pub fn wants_store(&self, store: &str) -> bool {
        self.stores
            .as_ref()
            .is_none_or(|s| s.iter().any(|x| x == store))
    }

    pub fn json(&self) -> Value {
        json!({
            "quick": self.quick, "only": self.only, "runs": self.runs, "cycles": self.cycles,
            "iters": self.iters, "secs": self.secs, "requests": self.requests,
            "locks": self.locks, "baseline": self.baseline,
            "stores": self.stores,
        })
    }
}

fn section(v: &str) -> Result<String, String> {
    let v = v.trim();
    if v.is_empty() || SECTIONS.contains(&v) {
        Ok(v.to_string())
    } else {
        Err(format!("unknown section '{v}'"))
    }
}

pub const STORES: [&str; 8] = [
    "redis",
    "redis-cluster",
    "memcached",
    "redlock",
    "postgres",
    "mysql",
    "etcd",
    "zookeeper",
];

fn store(v: &str) -> Result<String, String> {
    let v = v.trim();
    match STORES.contains(&v) {
        true => Ok(v.to_string()),
        false => Err(format!(
            "unknown store '{v}' (one of {})",
            STORES.join(", ")
        )),
    }
}

fn number(v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|n| (1..=10_000_000).contains(n))
        .ok_or_else(|| format!("needs a positive whole number, not '{v}'"))
}

fn seconds(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s <= 600.0)
        .ok_or_else(|| "needs a number of seconds in (0, 600]".to_string())
}
