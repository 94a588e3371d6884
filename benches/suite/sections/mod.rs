//! The nine sections. Each one measures and returns a [`Section`](crate::report::Section):
//! its tables, JSON and targets, which the report prints and writes.

mod app_sides;
pub mod applock;
pub mod contention;
pub mod elect;
pub mod exec;
pub mod handoff;
pub mod rss;
pub mod status;
pub mod throughput;
pub mod wait;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::{self, AcquireRequest, Backend, Holder, ReleaseMode, WaitOptions};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::procs::{run, run_checked, status_error};
use crate::Store;

#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Stats {
    /// Nearest-rank percentiles, in milliseconds.
    pub fn of(samples: &[Duration]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let n = ms.len();
        let pct = |q: f64| ms[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Stats {
            n,
            min: ms[0],
            p50: pct(0.50),
            p95: pct(0.95),
            p99: pct(0.99),
            max: ms[n - 1],
            mean: ms.iter().sum::<f64>() / n as f64,
        })
    }

    pub fn json(&self) -> Value {
        json!({
            "n": self.n, "min_ms": self.min, "p50_ms": self.p50, "p95_ms": self.p95,
            "p99_ms": self.p99, "max_ms": self.max, "mean_ms": self.mean,
        })
    }
}

pub type MakeCmd = Box<dyn Fn() -> Command + Send + Sync>;

/// How the rows of the `--baseline` binary start (this binary's start with `dlock`).
pub const BASELINE: &str = "dlock (baseline)";

/// The name of this binary's row for a baseline row's name; `None` for other rows.
pub fn current_of(name: &str) -> Option<String> {
    name.strip_prefix(BASELINE)
        .map(|rest| format!("dlock{rest}"))
}

/// Round-by-round ratios a / b (pairs measured next to each other, so a machine that speeds
/// up or slows down between rounds cancels out), as (median, min, max); `None` when no
/// round has both.
pub fn spread(pairs: impl IntoIterator<Item = Option<(f64, f64)>>) -> Option<(f64, f64, f64)> {
    let mut r: Vec<f64> = pairs.into_iter().flatten().map(|(a, b)| a / b).collect();
    r.sort_by(f64::total_cmp);
    Some((*r.get(r.len() / 2)?, r[0], r[r.len() - 1]))
}

/// A command measured side by side with the others.
pub struct Peer {
    pub name: String,
    /// The command line, for the JSON.
    pub shown: String,
    pub make: MakeCmd,
    pub runs: usize,
    pub warm: usize,
    /// Set when the peer cannot be measured (server missing, first run failed…).
    pub err: Option<String>,
    pub samples: Vec<Duration>,
}

impl Peer {
    pub fn new(name: &str, shown: &str, make: MakeCmd, runs: usize) -> Peer {
        Peer {
            name: name.into(),
            shown: shown.into(),
            make,
            runs,
            warm: 10.min(runs),
            err: None,
            samples: Vec::new(),
        }
    }

    pub fn failed(name: &str, shown: &str, err: String) -> Peer {
        let mut p = Peer::new(name, shown, Box::new(|| Command::new("false")), 0);
        p.err = Some(err);
        p
    }

    /// One run that must succeed (exit 0) before the peer is measured.
    pub fn probe(&mut self) {
        if self.err.is_none() {
            if let Err(e) = run_checked(&mut (self.make)(), Duration::from_secs(30)) {
                self.err = Some(e);
            }
        }
    }

    /// Runs once and records the time; the first failure disqualifies the peer.
    pub fn measure(&mut self, record: bool) {
        if self.err.is_some() {
            return;
        }
        match run(&mut (self.make)(), Duration::from_secs(30)) {
            Ok((took, status)) if status.success() => {
                if record {
                    self.samples.push(took)
                }
            }
            Ok((_, status)) => self.err = Some(status_error(status)),
            Err(e) => self.err = Some(e),
        }
    }

    pub fn stats(&self) -> Result<Stats, String> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Stats::of(&self.samples).ok_or_else(|| "no samples".into()),
        }
    }
}

pub fn bench_holder() -> Holder {
    dlock::holder::current(&["dlock-bench".to_string()])
}

pub fn request(holder: &Holder, key: &str, ttl: Duration, detached: bool) -> AcquireRequest {
    let mut holder = holder.clone();
    holder.acquired_at_ms = backend::now_ms();
    AcquireRequest {
        key: key.to_string(),
        owner: dlock::ids::new_owner_id(),
        reenter: Vec::new(),
        ttl,
        holder,
        detached,
        fair: true,
        sharing: Default::default(),
        queue: Default::default(),
    }
}

pub async fn open(store: &Store) -> Result<Arc<dyn Backend>, String> {
    backend::spec::open(&store.spec())
        .await
        .map_err(|e| format!("open: {e}"))
}

/// Acquires and releases `key` once.
pub async fn cycle(b: &dyn Backend, holder: &Holder, key: &str) -> Result<(), String> {
    let req = request(holder, key, Duration::from_secs(30), false);
    let acq = b
        .acquire(&req, &WaitOptions::until(None))
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    b.release(key, &acq.lease.owner, ReleaseMode::All)
        .await
        .map_err(|e| format!("release: {e}"))?;
    drop(acq);
    Ok(())
}

pub async fn with_timeout<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| Err(format!("timed out after {limit:.0?}")))
}

pub async fn join_all(mut set: JoinSet<Result<(), String>>) -> Result<(), String> {
    while let Some(r) = set.join_next().await {
        r.map_err(|e| format!("task: {e}"))??;
    }
    Ok(())
}

/// CPU time used by a process between `start` and `percent`, as a share of one core.
pub struct CpuMeter {
    pid: u32,
    ticks: u64,
    at: Instant,
}

impl CpuMeter {
    pub fn start(pid: Option<u32>) -> Option<CpuMeter> {
        let pid = pid?;
        Some(CpuMeter {
            pid,
            ticks: cpu_ticks(pid)?,
            at: Instant::now(),
        })
    }

    pub fn percent(&self) -> Option<f64> {
        let used = cpu_ticks(self.pid)?.checked_sub(self.ticks)? as f64 * tick_ms();
        Some(100.0 * used / (self.at.elapsed().as_secs_f64() * 1e3))
    }
}

pub fn tick_ms() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(10.0, |t| 1000.0 / t as f64)
}

/// Resident memory, in KiB.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the command: state is field 3, utime 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}
