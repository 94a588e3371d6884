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

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, Once, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use dlock::backend::BackendSpec;
use dlock::backend::{self, AcquireRequest, Backend, Holder, ReleaseMode, WaitOptions};
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use serde_json::{json, Map, Value};
use tokio::task::JoinSet;

const SECTIONS: [&str; 6] = [
    "exec",
    "contention",
    "handoff",
    "throughput",
    "rss",
    "status",
];

const USAGE: &str = "\
usage: cargo bench --bench suite [-- OPTIONS]

  --quick          scaled-down run (about a minute)
  --only LIST      comma-separated sections: exec,contention,handoff,throughput,rss,status
  --runs N         exec overhead: runs per command (default 200; etcdctl gets N/4)
  --cycles N       contention: lock cycles per configuration, split over the N processes (480)
  --iters N        hand-off: hand-offs per configuration (200)
  --secs S         throughput: seconds per configuration (3)
  --requests N     throughput: redis-benchmark requests (100000)
  --locks N        status: held locks to list (100000)
  --out DIR        where to write results.json (default: bench/ beside the release directory)";

// ---------------------------------------------------------------------------------------
// Options

struct Opts {
    quick: bool,
    only: Vec<String>,
    runs: usize,
    cycles: usize,
    iters: usize,
    secs: f64,
    requests: usize,
    locks: usize,
    out: Option<PathBuf>,
}

impl Opts {
    fn parse(args: impl Iterator<Item = String>) -> Result<Opts, String> {
        let args: Vec<String> = args.collect();
        let quick = args.iter().any(|a| a == "--quick");
        let mut o = Opts {
            quick,
            only: SECTIONS.iter().map(|s| s.to_string()).collect(),
            runs: if quick { 40 } else { 200 },
            cycles: if quick { 96 } else { 480 },
            iters: if quick { 50 } else { 200 },
            secs: if quick { 1.0 } else { 3.0 },
            requests: if quick { 20_000 } else { 100_000 },
            locks: if quick { 10_000 } else { 100_000 },
            out: None,
        };
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match name.as_str() {
                // `cargo bench` passes --bench to every bench binary.
                "--bench" | "--quick" => {}
                "-h" | "--help" => return Err(String::new()),
                "--only" => {
                    let list = value()?;
                    o.only = list
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect();
                    if let Some(bad) = o.only.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                        return Err(format!("unknown section '{bad}'"));
                    }
                }
                "--runs" => o.runs = number(&name, &value()?)?,
                "--cycles" => o.cycles = number(&name, &value()?)?,
                "--iters" => o.iters = number(&name, &value()?)?,
                "--requests" => o.requests = number(&name, &value()?)?,
                "--locks" => o.locks = number(&name, &value()?)?,
                "--secs" => {
                    o.secs = value()?
                        .parse::<f64>()
                        .ok()
                        .filter(|s| *s > 0.0 && *s <= 600.0)
                        .ok_or("--secs needs a number of seconds in (0, 600]")?
                }
                "--out" => o.out = Some(PathBuf::from(value()?)),
                other => return Err(format!("unknown argument '{other}'")),
            }
        }
        Ok(o)
    }

    fn wants(&self, section: &str) -> bool {
        self.only.iter().any(|s| s == section)
    }

    fn json(&self) -> Value {
        json!({
            "quick": self.quick, "only": self.only, "runs": self.runs, "cycles": self.cycles,
            "iters": self.iters, "secs": self.secs, "requests": self.requests,
            "locks": self.locks,
        })
    }
}

fn number(name: &str, v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|n| (1..=10_000_000).contains(n))
        .ok_or_else(|| format!("{name} needs a positive whole number, not '{v}'"))
}

// ---------------------------------------------------------------------------------------
// Interruption and child processes

/// Set on Ctrl-C: every loop stops, servers are killed and temp dirs removed as usual.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// The suite's temporary directory: every store and server directory is inside.
static ROOT: OnceLock<PathBuf> = OnceLock::new();
/// Servers running now, for the last-resort clean-up.
static SERVERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn temp_dir() -> Result<tempfile::TempDir, String> {
    match ROOT.get() {
        Some(root) => tempfile::tempdir_in(root),
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("temp dir: {e}"))
}

/// On SIGINT, SIGTERM or SIGHUP, asks the suite to stop (it then cleans up as usual); on a
/// second signal, or if it has not finished 10 s later, kills the servers, removes the
/// temporary directory and exits. `ctrlc` runs the handler on a thread of its own, so that
/// a backend call that never returns cannot keep it from acting. (Not tokio's signals:
/// that feature would make `enable_all` start a signal driver in the dlock binary the
/// suite measures, which the release build does not have.)
fn handle_signals() {
    let handled = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            bail_out();
        }
        eprintln!("\nsuite: interrupted; stopping (a second signal quits at once)");
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(10));
            bail_out();
        });
    });
    if let Err(e) = handled {
        eprintln!("suite: cannot catch signals: {e}");
    }
}

/// Kills the servers, removes the temporary directory and exits 130.
fn bail_out() {
    for &pid in lock(&SERVERS).iter() {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    if let Some(root) = ROOT.get() {
        let _ = std::fs::remove_dir_all(root);
    }
    std::process::exit(130);
}

fn server_started(pid: u32) {
    lock(&SERVERS).push(pid);
}

fn server_stopped(pid: u32) {
    lock(&SERVERS).retain(|&p| p != pid);
}

/// Children being waited for, and when the watchdog must SIGKILL them.
static WATCHED: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
static WATCHDOG: Once = Once::new();

fn watch(pid: u32, deadline: Instant) {
    WATCHDOG.call_once(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = Instant::now();
            let list = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
            for &(pid, deadline) in list.iter() {
                if now >= deadline || interrupted() {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                }
            }
        });
    });
    lock(&WATCHED).push((pid, deadline));
}

fn unwatch(pid: u32) {
    lock(&WATCHED).retain(|&(p, _)| p != pid);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A started child, SIGKILLed by the watchdog if it outlives its deadline.
struct Running {
    child: Child,
    start: Instant,
    deadline: Instant,
}

fn spawn(cmd: &mut Command, limit: Duration) -> Result<Running, String> {
    if interrupted() {
        return Err("interrupted".into());
    }
    let start = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", cmd.get_program().to_string_lossy()))?;
    let deadline = start + limit;
    watch(child.id(), deadline);
    Ok(Running {
        child,
        start,
        deadline,
    })
}

impl Running {
    /// Waits for the exit; returns the wall time since the spawn and the status.
    fn finish(mut self) -> Result<(Duration, ExitStatus), String> {
        let pid = self.child.id();
        // Wait without reaping, so the pid cannot be reused before the watchdog forgets it.
        let waited = loop {
            match waitid(
                Id::Pid(Pid::from_raw(pid as i32)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Err(Errno::EINTR) => continue,
                other => break other,
            }
        };
        let end = Instant::now();
        unwatch(pid);
        let status = self.child.wait().map_err(|e| format!("wait: {e}"))?;
        waited.map_err(|e| format!("waitid: {e}"))?;
        if status.signal() == Some(libc::SIGKILL) && (end >= self.deadline || interrupted()) {
            return Err(if interrupted() {
                "interrupted".into()
            } else {
                format!(
                    "timed out after {:.0?}",
                    self.deadline.duration_since(self.start)
                )
            });
        }
        Ok((end.duration_since(self.start), status))
    }
}

/// Runs `cmd` with no input or output; returns its wall time and status.
fn run(cmd: &mut Command, limit: Duration) -> Result<(Duration, ExitStatus), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn(cmd, limit)?.finish()
}

/// Runs `cmd` once, keeping its stdout and stderr; an error unless it exits 0.
fn run_checked(cmd: &mut Command, limit: Duration) -> Result<(Duration, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut r = spawn(cmd, limit)?;
    let mut out_pipe = r.child.stdout.take().expect("piped stdout");
    let mut err_pipe = r.child.stderr.take().expect("piped stderr");
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut out = String::new();
    let _ = out_pipe.read_to_string(&mut out);
    let err = errs.join().unwrap_or_default();
    let (took, status) = r.finish()?;
    check(status, &err)?;
    Ok((took, out))
}

/// Ok for exit 0; otherwise the code and the last line the command wrote on stderr.
fn check(status: ExitStatus, stderr: &str) -> Result<(), String> {
    if status.success() {
        return Ok(());
    }
    let how = match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "failed".into(),
    };
    match stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => Err(format!("{how}: {line}")),
        None => Err(how),
    }
}

fn status_error(status: ExitStatus) -> String {
    check(status, "").err().unwrap_or_default()
}

/// Children spawned for a measurement, killed if the measurement is abandoned.
struct Guard(Vec<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Makes `cmd`'s process die with the suite, even if the suite is SIGKILLed. Only for
/// children spawned by the main thread (the signal follows the spawning thread).
fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        })
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A port that was free a moment ago (the kernel picks it; we release it at once).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// Servers

/// A redis-server on a free loopback port with no persistence; killed on drop.
struct RedisServer {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start() -> Result<RedisServer, String> {
        if which("redis-server").is_none() {
            return Err("redis-server is not installed (apt-get install redis-server)".into());
        }
        let dir = temp_dir()?;
        for _ in 0..20 {
            let port = free_port();
            let mut child = die_with_parent(
                Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(dir.path())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
            .spawn()
            .map_err(|e| format!("cannot start redis-server: {e}"))?;
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // port taken by someone else: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    server_started(child.id());
                    return Ok(RedisServer {
                        port,
                        child,
                        _dir: dir,
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err("could not start redis-server on a free port".into())
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        server_stopped(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-member etcd on free loopback ports with a temporary data dir; killed on drop.
struct EtcdServer {
    endpoint: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl EtcdServer {
    fn start() -> Result<EtcdServer, String> {
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

fn etcdctl(endpoint: &str) -> Command {
    let mut c = Command::new("etcdctl");
    c.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"));
    c
}

// ---------------------------------------------------------------------------------------
// Statistics and output

#[derive(Clone, Copy, Debug)]
struct Stats {
    n: usize,
    min: f64,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

impl Stats {
    /// Nearest-rank percentiles, in milliseconds.
    fn of(samples: &[Duration]) -> Option<Stats> {
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

    fn json(&self) -> Value {
        json!({
            "n": self.n, "min_ms": self.min, "p50_ms": self.p50, "p95_ms": self.p95,
            "p99_ms": self.p99, "max_ms": self.max, "mean_ms": self.mean,
        })
    }
}

fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.3}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

fn rate(v: f64) -> String {
    format!("{v:.0}")
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |r| format!("{r:.2}x"))
}

/// One line, at most 120 characters, for tables.
fn short(e: &str) -> String {
    let line = e.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= 120 {
        line
    } else {
        format!("{}…", line.chars().take(119).collect::<String>())
    }
}

fn na(e: &str) -> String {
    format!("n/a (error: {})", short(e))
}

enum Row {
    Cells(Vec<String>),
    /// Leading cells (the row's name), then the error in place of the figures.
    Failed(Vec<String>, String),
}

struct Table {
    head: Vec<&'static str>,
    rows: Vec<Row>,
    /// How many leading columns are text (left-aligned); the rest are figures.
    text_cols: usize,
}

impl Table {
    fn new(head: &[&'static str]) -> Table {
        Table {
            head: head.to_vec(),
            rows: Vec::new(),
            text_cols: 1,
        }
    }

    fn text_cols(mut self, n: usize) -> Table {
        self.text_cols = n;
        self
    }

    fn pad(&self, i: usize, c: &str, width: usize) -> String {
        if i < self.text_cols {
            format!("{c:<width$}")
        } else {
            format!("{c:>width$}")
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(Row::Cells(cells));
    }

    fn failed(&mut self, name: impl Into<String>, err: &str) {
        self.rows
            .push(Row::Failed(vec![name.into()], err.to_string()));
    }

    fn failed_cells(&mut self, lead: Vec<String>, err: &str) {
        self.rows.push(Row::Failed(lead, err.to_string()));
    }

    fn print(&self, title: &str) {
        let mut w: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            let (Row::Cells(cells) | Row::Failed(cells, _)) = row;
            for (i, c) in cells.iter().enumerate().take(w.len()) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells
                .iter()
                .enumerate()
                .take(w.len())
                .map(|(i, c)| self.pad(i, c, w[i]))
                .collect();
            cells.join("  ")
        };
        println!("\n{title}");
        let head: Vec<String> = self.head.iter().map(|h| h.to_string()).collect();
        println!("{}", line(&head).trim_end());
        let dashes: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
        println!("{}", line(&dashes));
        for row in &self.rows {
            match row {
                Row::Cells(cells) => println!("{}", line(cells).trim_end()),
                Row::Failed(lead, err) => println!("{}  {}", line(lead), na(err)),
            }
        }
    }
}

/// A goal from the issues, checked against what this run measured.
struct Target {
    name: String,
    unit: &'static str,
    value: Result<f64, String>,
    goal: Goal,
}

#[derive(Clone, Copy)]
enum Goal {
    AtMost(f64),
    AtLeast(f64),
    Below(f64),
}

impl Goal {
    fn check(self, v: f64) -> bool {
        match self {
            Goal::AtMost(g) => v <= g,
            Goal::AtLeast(g) => v >= g,
            Goal::Below(g) => v < g,
        }
    }

    fn text(self, unit: &str) -> String {
        match self {
            Goal::AtMost(g) => format!("<= {g}{}", spaced(unit)),
            Goal::AtLeast(g) => format!(">= {g}{}", spaced(unit)),
            Goal::Below(g) => format!("< {g}{}", spaced(unit)),
        }
    }
}

/// `x` sticks to its number (1.3x); other units are spaced (2 ms).
fn spaced(unit: &str) -> String {
    if unit == "x" {
        unit.to_string()
    } else {
        format!(" {unit}")
    }
}

fn fmt_value(v: f64, unit: &str) -> String {
    if unit == "x" {
        format!("{v:.2}x")
    } else if v.abs() >= 100.0 {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.3} {unit}")
    }
}

// ---------------------------------------------------------------------------------------
// The suite's context

/// Where a `dlock` command or the library keeps its locks.
#[derive(Clone)]
enum Store {
    Local(PathBuf),
    Redis(String),
}

impl Store {
    fn label(&self) -> &'static str {
        match self {
            Store::Local(_) => "local",
            Store::Redis(_) => "redis",
        }
    }

    fn spec(&self) -> BackendSpec {
        match self {
            Store::Local(dir) => BackendSpec::Local(dir.clone()),
            Store::Redis(url) => BackendSpec::One(url.clone()),
        }
    }
}

struct Ctx {
    o: Opts,
    dlock: PathBuf,
    tmp: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    redis: Option<Result<RedisServer, String>>,
    etcd: Option<Result<EtcdServer, String>>,
    sections: Map<String, Value>,
    targets: Vec<Target>,
}

impl Ctx {
    /// The Redis server shared by the sections (started on first use).
    fn redis(&mut self) -> Result<Store, String> {
        let r = self.redis.get_or_insert_with(RedisServer::start);
        r.as_ref()
            .map(|s| Store::Redis(s.url()))
            .map_err(Clone::clone)
    }

    fn redis_pid(&self) -> Option<u32> {
        Some(self.redis.as_ref()?.as_ref().ok()?.child.id())
    }

    fn redis_port(&mut self) -> Result<u16, String> {
        self.redis()?;
        Ok(self
            .redis
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .map_or(0, |s| s.port))
    }

    /// The etcd endpoint (started on first use).
    fn etcd(&mut self) -> Result<String, String> {
        let e = self.etcd.get_or_insert_with(EtcdServer::start);
        e.as_ref().map(|s| s.endpoint.clone()).map_err(Clone::clone)
    }

    /// A fresh local store directory.
    fn local(&self, name: &str) -> Store {
        let dir = self.tmp.path().join(format!("store-{name}"));
        let _ = std::fs::create_dir_all(&dir);
        Store::Local(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// A `dlock` command pointed at `store`, with none of the caller's dlock variables.
    fn dlock(&self, store: &Store) -> Command {
        dlock_cmd(&self.dlock, store)
    }

    fn target(&mut self, name: &str, unit: &'static str, value: Result<f64, String>, goal: Goal) {
        self.targets.push(Target {
            name: name.to_string(),
            unit,
            value,
            goal,
        });
    }
}

fn dlock_cmd(bin: &Path, store: &Store) -> Command {
    let mut c = Command::new(bin);
    for v in dlock::config::INHERITED_ENV {
        c.env_remove(v);
    }
    match store {
        Store::Local(dir) => c.env("DLOCK_DIR", dir),
        Store::Redis(url) => c.env("DLOCK_URL", url),
    };
    c
}

type MakeCmd = Box<dyn Fn() -> Command + Send + Sync>;

/// A command measured side by side with the others.
struct Peer {
    name: String,
    /// The command line, for the JSON.
    shown: String,
    make: MakeCmd,
    runs: usize,
    warm: usize,
    /// Set when the peer cannot be measured (server missing, first run failed…).
    err: Option<String>,
    samples: Vec<Duration>,
}

impl Peer {
    fn new(name: &str, shown: &str, make: MakeCmd, runs: usize) -> Peer {
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

    fn failed(name: &str, shown: &str, err: String) -> Peer {
        let mut p = Peer::new(name, shown, Box::new(|| Command::new("false")), 0);
        p.err = Some(err);
        p
    }

    /// One run that must succeed (exit 0) before the peer is measured.
    fn probe(&mut self) {
        if self.err.is_none() {
            if let Err(e) = run_checked(&mut (self.make)(), Duration::from_secs(30)) {
                self.err = Some(e);
            }
        }
    }

    /// Runs once and records the time; the first failure disqualifies the peer.
    fn measure(&mut self, record: bool) {
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

    fn stats(&self) -> Result<Stats, String> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Stats::of(&self.samples).ok_or_else(|| "no samples".into()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The library

fn bench_holder() -> Holder {
    dlock::holder::current(&["dlock-bench".to_string()])
}

fn request(holder: &Holder, key: &str, ttl: Duration, detached: bool) -> AcquireRequest {
    let mut holder = holder.clone();
    holder.acquired_at_ms = backend::now_ms();
    AcquireRequest {
        key: key.to_string(),
        owner: dlock::holder::new_owner_id(),
        reenter: Vec::new(),
        ttl,
        holder,
        detached,
        fair: true,
    }
}

async fn open(store: &Store) -> Result<Arc<dyn Backend>, String> {
    backend::open(&store.spec())
        .await
        .map_err(|e| format!("open: {e}"))
}

/// Acquires and releases `key` once.
async fn cycle(b: &dyn Backend, holder: &Holder, key: &str) -> Result<(), String> {
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

async fn with_timeout<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| Err(format!("timed out after {limit:.0?}")))
}

async fn join_all(mut set: JoinSet<Result<(), String>>) -> Result<(), String> {
    while let Some(r) = set.join_next().await {
        r.map_err(|e| format!("task: {e}"))??;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 1. exec overhead

fn section_exec(ctx: &mut Ctx) {
    eprintln!("== exec overhead");
    let runs = ctx.o.runs;
    let etcd_runs = (runs / 4).max(5);
    let local = ctx.local("exec");
    let redis = ctx.redis();
    let redis_port = ctx.redis_port();
    let etcd = ctx.etcd();
    let lockfile = ctx.file("exec.flock");

    let mut peers: Vec<Peer> = Vec::new();
    peers.push(Peer::new(
        "true (spawn only)",
        "true",
        Box::new(|| Command::new("true")),
        runs,
    ));
    let bin = ctx.dlock.clone();
    peers.push(Peer::new(
        "dlock --version",
        "dlock --version",
        Box::new(move || {
            let mut c = Command::new(&bin);
            c.arg("--version");
            c
        }),
        runs,
    ));
    let f = lockfile.clone();
    peers.push(Peer::new(
        "flock FILE true",
        "flock FILE true",
        Box::new(move || {
            let mut c = Command::new("flock");
            c.arg(&f).arg("true");
            c
        }),
        runs,
    ));
    for store in [Ok(local), redis] {
        let name_of = |label: &str| format!("dlock exec ({label})");
        let shown = "dlock exec bench-exec -- true";
        match store {
            Ok(store) => {
                let bin = ctx.dlock.clone();
                let name = name_of(store.label());
                peers.push(Peer::new(
                    &name,
                    shown,
                    Box::new(move || {
                        let mut c = dlock_cmd(&bin, &store);
                        c.args(["exec", "bench-exec", "--", "true"]);
                        c
                    }),
                    runs,
                ))
            }
            Err(e) => peers.push(Peer::failed(&name_of("redis"), shown, e)),
        }
    }
    let shown = "etcdctl lock bench-exec true";
    match etcd {
        Ok(ep) => {
            let mut p = Peer::new(
                "etcdctl lock",
                shown,
                Box::new(move || {
                    let mut c = etcdctl(&ep);
                    c.args(["lock", "bench-exec", "true"]);
                    c
                }),
                etcd_runs,
            );
            p.warm = 3;
            peers.push(p);
        }
        Err(e) => peers.push(Peer::failed("etcdctl lock", shown, e)),
    }
    let shown = "redis-cli -p PORT PING";
    match redis_port {
        Ok(port) => peers.push(Peer::new(
            "redis-cli PING",
            shown,
            Box::new(move || {
                let mut c = Command::new("redis-cli");
                c.args(["-p", &port.to_string(), "PING"]);
                c
            }),
            runs,
        )),
        Err(e) => peers.push(Peer::failed("redis-cli PING", shown, e)),
    }

    for p in &mut peers {
        p.probe();
    }
    for p in &mut peers {
        for _ in 0..p.warm {
            p.measure(false);
        }
    }
    // Round robin, so that a slow phase of the machine hurts every peer alike.
    for i in 0..runs {
        if interrupted() {
            break;
        }
        for p in peers.iter_mut().filter(|p| i < p.runs) {
            p.measure(true);
        }
    }

    let median = |name: &str| -> Result<f64, String> {
        let p = peers.iter().find(|p| p.name == name).expect("peer");
        p.stats().map(|s| s.p50).map_err(|e| format!("{name}: {e}"))
    };
    let flock = median("flock FILE true");
    let mut table = Table::new(&[
        "command",
        "runs",
        "median ms",
        "p95 ms",
        "min ms",
        "vs flock",
    ]);
    let mut out = Vec::new();
    for p in &peers {
        match p.stats() {
            Ok(s) => {
                table.row(vec![
                    p.name.clone(),
                    s.n.to_string(),
                    ms(s.p50),
                    ms(s.p95),
                    ms(s.min),
                    ratio(flock.as_ref().ok().map(|f| s.p50 / f)),
                ]);
                out.push(json!({"name": p.name, "command": p.shown, "stats": s.json()}));
            }
            Err(e) => {
                table.failed(&p.name, &e);
                out.push(json!({"name": p.name, "command": p.shown, "error": e}));
            }
        }
    }
    table.print("1. exec overhead: wall time per run (spawn → exit), after warm-up");

    let div = |a: Result<f64, String>, b: &Result<f64, String>| -> Result<f64, String> {
        Ok(a? / b.clone()?)
    };
    let local_ratio = div(median("dlock exec (local)"), &flock);
    let redis_ratio = div(median("dlock exec (redis)"), &flock);
    let etcd_ratio = div(median("etcdctl lock"), &median("dlock exec (redis)"));
    println!(
        "ratios (medians): dlock-local/flock {}, dlock-redis/flock {}, etcdctl/dlock-redis {}",
        ratio(local_ratio.clone().ok()),
        ratio(redis_ratio.clone().ok()),
        ratio(etcd_ratio.clone().ok()),
    );
    let r = |v: &Result<f64, String>| v.as_ref().ok().copied();
    ctx.sections.insert(
        "exec".into(),
        json!({
            "runs": runs, "etcd_runs": etcd_runs, "peers": out,
            "ratios": {
                "dlock_local_over_flock": r(&local_ratio),
                "dlock_redis_over_flock": r(&redis_ratio),
                "etcdctl_over_dlock_redis": r(&etcd_ratio),
            },
        }),
    );
    ctx.target(
        "exec: dlock-local / flock",
        "x",
        local_ratio,
        Goal::AtMost(1.3),
    );
    ctx.target(
        "exec: dlock-redis / flock",
        "x",
        redis_ratio,
        Goal::AtMost(1.5),
    );
    ctx.target(
        "exec: etcdctl / dlock-redis",
        "x",
        etcd_ratio,
        Goal::AtLeast(5.0),
    );
}

// ---------------------------------------------------------------------------------------
// 2. contention

struct Contention {
    cycles: usize,
    elapsed: Duration,
    stats: Stats,
}

/// Runs of each contention row, interleaved with the other rows. Seven: with three, the
/// median of one 8-process row still moved by 0.1x between two runs on the reference VM.
const CONTENTION_ROUNDS: usize = 7;

/// Each round's rate, `None` for a round that failed.
fn rates(runs: &[Result<Contention, String>]) -> Vec<Option<f64>> {
    runs.iter()
        .map(|r| r.as_ref().ok().map(Contention::rate))
        .collect()
}

/// Each round's rate over flock's rate in the same round (runs next to each other, so a
/// machine that speeds up or slows down between rounds cancels out), as (median, min,
/// max); `None` when no round of both ran.
fn paired_ratios(runs: &[Option<f64>], flock: &[Option<f64>]) -> Option<(f64, f64, f64)> {
    let mut r: Vec<f64> = runs
        .iter()
        .zip(flock)
        .filter_map(|(a, f)| Some((*a)? / (*f)?))
        .collect();
    r.sort_by(f64::total_cmp);
    Some((*r.get(r.len() / 2)?, r[0], r[r.len() - 1]))
}

/// The run with the median rate (the first error if any run failed); `None` when none ran.
fn median_run(runs: Vec<Result<Contention, String>>) -> Option<Result<Contention, String>> {
    let mut ok = Vec::with_capacity(runs.len());
    for r in runs {
        match r {
            Ok(c) => ok.push(c),
            Err(e) => return Some(Err(e)),
        }
    }
    ok.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    let mid = ok.len() / 2;
    (!ok.is_empty()).then(|| Ok(ok.swap_remove(mid)))
}

impl Contention {
    fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
}

/// `n` threads each run `m` commands in sequence, all on the same lock.
fn contend(make: &(dyn Fn() -> Command + Sync), n: usize, m: usize) -> Result<Contention, String> {
    let barrier = Barrier::new(n + 1);
    let limit = Duration::from_secs(60);
    let (results, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let mut samples = Vec::with_capacity(m);
                    for _ in 0..m {
                        match run(&mut make(), limit) {
                            Ok((took, status)) if status.success() => samples.push(took),
                            Ok((_, status)) => return Err(status_error(status)),
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(samples)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<Vec<Duration>, String>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect();
        (results, start.elapsed())
    });
    let mut all = Vec::with_capacity(n * m);
    for r in results {
        all.extend(r?);
    }
    let stats = Stats::of(&all).ok_or("no samples")?;
    Ok(Contention {
        cycles: all.len(),
        elapsed,
        stats,
    })
}

fn section_contention(ctx: &mut Ctx) {
    eprintln!("== contention");
    let local = ctx.local("contention");
    let redis = ctx.redis();
    let lockfile = ctx.file("contention.flock");
    let mut peers: Vec<(String, Result<MakeCmd, String>)> = Vec::new();
    peers.push((
        "flock FILE true".into(),
        Ok(Box::new(move || {
            let mut c = Command::new("flock");
            c.arg(&lockfile).arg("true");
            c
        })),
    ));
    for store in [Ok(local), redis] {
        let label = store.as_ref().map_or("redis", Store::label);
        let name = format!("dlock exec ({label})");
        let bin = ctx.dlock.clone();
        let make = store.map(|store| -> MakeCmd {
            Box::new(move || {
                let mut c = dlock_cmd(&bin, &store);
                c.args(["exec", "bench-contention", "--", "true"]);
                c
            })
        });
        // One run first: a backend that does not work is reported once, not N×M times.
        let make = make.and_then(|f| run_checked(&mut f(), Duration::from_secs(30)).map(|_| f));
        peers.push((name, make));
    }

    let mut table = Table::new(&[
        "N × M",
        "command",
        "cycles/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "vs flock",
        "rounds vs flock",
    ])
    .text_cols(2);
    let mut out = Vec::new();
    let mut at8: BTreeMap<String, Result<f64, String>> = BTreeMap::new();
    // A row takes about half a second, so one run of it swings with whatever else the
    // machine does: each row is run several times, interleaved with its peers, and the
    // run with the median rate is reported.
    let rounds = if ctx.o.quick { 1 } else { CONTENTION_ROUNDS };
    for n in [2usize, 8, 32] {
        let m = ctx.o.cycles.div_ceil(n).max(1);
        let mut runs: Vec<Vec<Result<Contention, String>>> =
            peers.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            for ((_, make), runs) in peers.iter().zip(runs.iter_mut()) {
                if interrupted() {
                    break;
                }
                runs.push(match make {
                    Ok(make) => contend(make.as_ref(), n, m),
                    Err(e) => Err(e.clone()),
                });
            }
        }
        // flock is the first peer: every row is compared with it, round by round.
        let flock_rates = runs.first().map(|r| rates(r)).unwrap_or_default();
        for ((name, _), runs) in peers.iter().zip(runs) {
            let label = format!("{n} × {m}");
            let paired = paired_ratios(&rates(&runs), &flock_rates);
            let Some(r) = median_run(runs) else { break };
            match r {
                Ok(c) => {
                    let per_s = c.rate();
                    let vs = paired.map(|(median, _, _)| median);
                    let spread = paired.map_or_else(
                        || "n/a".to_string(),
                        |(_, lo, hi)| format!("{lo:.2}–{hi:.2}"),
                    );
                    table.row(vec![
                        label,
                        name.clone(),
                        rate(per_s),
                        ms(c.stats.p50),
                        ms(c.stats.p99),
                        ms(c.stats.max),
                        ratio(vs),
                        spread,
                    ]);
                    out.push(json!({
                        "n": n, "m": m, "name": name, "cycles": c.cycles,
                        "elapsed_s": c.elapsed.as_secs_f64(), "cycles_per_s": per_s,
                        "per_invocation": c.stats.json(), "vs_flock": vs,
                        "vs_flock_rounds": paired.map(|(_, lo, hi)| json!({"min": lo, "max": hi})),
                    }));
                    if n == 8 {
                        at8.insert(name.clone(), vs.ok_or_else(|| "flock: n/a".to_string()));
                    }
                }
                Err(e) => {
                    table.failed_cells(vec![label, name.clone()], &e);
                    out.push(json!({"n": n, "m": m, "name": name, "error": e}));
                    if n == 8 {
                        at8.insert(name.clone(), Err(e));
                    }
                }
            }
        }
    }
    table.print(
        "2. contention: N processes each running M × `CMD` in sequence on one key \
         (p50/p99/max: wall time per invocation, waiting included; vs flock: median of \
         the rounds' ratios to the flock run beside them, and their range)",
    );
    ctx.sections
        .insert("contention".into(), json!({ "runs": out }));
    for label in ["local", "redis"] {
        let name = format!("dlock exec ({label})");
        let v = at8
            .get(&name)
            .cloned()
            .unwrap_or_else(|| Err("not measured".into()));
        ctx.target(
            &format!("contention N=8: dlock-{label} / flock cycles/s"),
            "x",
            v,
            Goal::AtLeast(0.8),
        );
    }
}

// ---------------------------------------------------------------------------------------
// 3. hand-off latency

/// `waiters + 1` tasks take turns on one key; each holds it for `hold`, so the others are
/// waiting in `acquire` when it is released. A sample is the time from just before
/// `release` to the moment the next holder's `acquire` returns.
async fn handoff(
    b: Arc<dyn Backend>,
    key: &str,
    waiters: usize,
    iters: usize,
    hold: Duration,
) -> Result<Vec<Duration>, String> {
    struct Shared {
        last_release: Mutex<Option<Instant>>,
        samples: Mutex<Vec<Duration>>,
        done: AtomicBool,
    }
    let sh = Arc::new(Shared {
        last_release: Mutex::new(None),
        samples: Mutex::new(Vec::with_capacity(iters)),
        done: AtomicBool::new(false),
    });
    let holder = bench_holder();
    let mut set = JoinSet::new();
    for _ in 0..=waiters {
        let (b, sh, key, holder) = (b.clone(), sh.clone(), key.to_string(), holder.clone());
        set.spawn(async move {
            loop {
                let req = request(&holder, &key, Duration::from_secs(30), false);
                let acq = b
                    .acquire(&req, &WaitOptions::until(None))
                    .await
                    .map_err(|e| format!("acquire: {e}"))?;
                let now = Instant::now();
                let last = lock(&sh.last_release).take();
                if let Some(t0) = last {
                    let mut samples = lock(&sh.samples);
                    if samples.len() < iters {
                        samples.push(now.duration_since(t0));
                    }
                    if samples.len() >= iters || interrupted() {
                        sh.done.store(true, Ordering::SeqCst);
                    }
                }
                let done = sh.done.load(Ordering::SeqCst);
                if !done {
                    tokio::time::sleep(hold).await;
                    *lock(&sh.last_release) = Some(Instant::now());
                }
                b.release(&key, &acq.lease.owner, ReleaseMode::All)
                    .await
                    .map_err(|e| format!("release: {e}"))?;
                drop(acq);
                if done {
                    return Ok(());
                }
            }
        });
    }
    join_all(set).await?;
    let samples = std::mem::take(&mut *lock(&sh.samples));
    Ok(samples)
}

fn section_handoff(ctx: &mut Ctx) {
    eprintln!("== hand-off latency");
    let iters = ctx.o.iters;
    let hold = Duration::from_millis(5);
    let stores = [Ok(ctx.local("handoff")), ctx.redis()];
    let mut table = Table::new(&[
        "backend",
        "waiters",
        "hand-offs",
        "p50 ms",
        "p99 ms",
        "max ms",
    ]);
    let mut out = Vec::new();
    let mut redis_p50 = Err("not measured".to_string());
    for store in stores {
        let label = store.as_ref().map_or("redis", Store::label);
        for waiters in [1usize, 4] {
            if interrupted() {
                break;
            }
            let limit = hold * iters as u32 * 3 + Duration::from_secs(20);
            let r = match &store {
                Ok(store) => ctx.rt.block_on(with_timeout(limit, async {
                    let b = open(store).await?;
                    let key = format!("bench-handoff-{waiters}");
                    // One cycle first: a backend that does not work fails fast.
                    cycle(b.as_ref(), &bench_holder(), &key).await?;
                    handoff(b, &key, waiters, iters, hold).await
                })),
                Err(e) => Err(e.clone()),
            };
            let r = r.and_then(|s| Stats::of(&s).ok_or_else(|| "no samples".into()));
            match r {
                Ok(s) => {
                    table.row(vec![
                        label.into(),
                        waiters.to_string(),
                        s.n.to_string(),
                        ms(s.p50),
                        ms(s.p99),
                        ms(s.max),
                    ]);
                    out.push(json!({"backend": label, "waiters": waiters, "stats": s.json()}));
                    if label == "redis" && waiters == 1 {
                        redis_p50 = Ok(s.p50);
                    }
                }
                Err(e) => {
                    table.failed_cells(vec![label.into(), waiters.to_string()], &e);
                    out.push(json!({"backend": label, "waiters": waiters, "error": e}));
                    if label == "redis" && waiters == 1 {
                        redis_p50 = Err(e);
                    }
                }
            }
        }
    }
    table.print(&format!(
        "3. hand-off latency (library): release → next holder's acquire returns; \
         each holder keeps the lock {hold:?} so the others are waiting"
    ));
    ctx.sections.insert(
        "handoff".into(),
        json!({"hold_ms": hold.as_millis() as u64, "iters": iters, "runs": out}),
    );
    ctx.target("hand-off p50, redis", "ms", redis_p50, Goal::Below(2.0));
}

// ---------------------------------------------------------------------------------------
// 4. throughput

/// Each client acquires and releases its own key in a loop; returns cycles per second
/// over `secs` (after a short warm-up), and the number of cycles done in all.
async fn throughput(
    backends: Vec<Arc<dyn Backend>>,
    tag: &str,
    secs: f64,
) -> Result<(f64, u64), String> {
    let holder = bench_holder();
    cycle(
        backends[0].as_ref(),
        &holder,
        &format!("bench-tp-{tag}-probe"),
    )
    .await?;
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut set = JoinSet::new();
    for (i, b) in backends.into_iter().enumerate() {
        let (count, stop, holder) = (count.clone(), stop.clone(), holder.clone());
        let key = format!("bench-tp-{tag}-{i}");
        set.spawn(async move {
            while !stop.load(Ordering::Relaxed) && !interrupted() {
                cycle(b.as_ref(), &holder, &key).await?;
                count.fetch_add(1, Ordering::Relaxed);
                // A backend whose calls complete without ever waiting would otherwise keep
                // the workers busy, and the timers (the measurement's end) would never fire.
                tokio::task::yield_now().await;
            }
            Ok(())
        });
    }
    let watch = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (c0, t0) = (count.load(Ordering::Relaxed), Instant::now());
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let (c1, t1) = (count.load(Ordering::Relaxed), Instant::now());
        stop.store(true, Ordering::Relaxed);
        (c1 - c0) as f64 / t1.duration_since(t0).as_secs_f64()
    };
    // A client that fails ends the measurement at once.
    let (per_s, joined) = tokio::join!(watch, async {
        let r = join_all(set).await;
        stop.store(true, Ordering::Relaxed);
        r
    });
    joined?;
    Ok((per_s, count.load(Ordering::Relaxed) + 1))
}

/// CPU time used by a process between `start` and `percent`, as a share of one core.
struct CpuMeter {
    pid: u32,
    ticks: u64,
    at: Instant,
}

impl CpuMeter {
    fn start(pid: Option<u32>) -> Option<CpuMeter> {
        let pid = pid?;
        Some(CpuMeter {
            pid,
            ticks: cpu_ticks(pid)?,
            at: Instant::now(),
        })
    }

    fn percent(&self) -> Option<f64> {
        let used = cpu_ticks(self.pid)?.checked_sub(self.ticks)? as f64 * tick_ms();
        Some(100.0 * used / (self.at.elapsed().as_secs_f64() * 1e3))
    }
}

fn tick_ms() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(10.0, |t| 1000.0 / t as f64)
}

fn percent(p: Option<f64>) -> String {
    p.map_or(String::new(), |p| format!("{p:.0}%"))
}

/// Commands the server has run so far (`INFO commandstats`, less INFO itself): all of
/// them, those inside scripts included, and the script calls (EVAL, EVALSHA, FCALL…).
fn redis_commands(port: u16) -> Option<(u64, u64)> {
    let (_, out) = run_checked(
        Command::new("redis-cli").args(["-p", &port.to_string(), "INFO", "commandstats"]),
        Duration::from_secs(10),
    )
    .ok()?;
    let (mut all, mut scripts) = (0, 0);
    for line in out.lines() {
        let Some((name, rest)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls: u64 = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())?;
        if name == "info" {
            continue;
        }
        all += calls;
        if [
            "eval",
            "evalsha",
            "eval_ro",
            "evalsha_ro",
            "fcall",
            "fcall_ro",
        ]
        .contains(&name)
        {
            scripts += calls;
        }
    }
    Some((all, scripts))
}

/// `redis-benchmark -t set -q`: SET requests per second.
fn redis_benchmark(port: u16, clients: usize, requests: usize) -> Result<f64, String> {
    let (_, out) = run_checked(
        Command::new("redis-benchmark")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                "set",
                "-q",
            ])
            .args(["-n", &requests.to_string(), "-c", &clients.to_string()]),
        Duration::from_secs(300),
    )?;
    out.split(['\r', '\n'])
        .filter(|l| l.contains("requests per second"))
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
        .next_back()
        .ok_or_else(|| format!("cannot read redis-benchmark's output: {}", short(&out)))
}

fn section_throughput(ctx: &mut Ctx) {
    eprintln!("== throughput");
    let secs = ctx.o.secs;
    let requests = ctx.o.requests;
    let redis = ctx.redis();
    let port = ctx.redis_port();
    let local = ctx.local("throughput");
    let limit = Duration::from_secs_f64(secs + 30.0);

    let mut table = Table::new(&[
        "what",
        "clients",
        "ops/s",
        "vs SET",
        "scripts/cycle",
        "cmds/cycle",
        "server CPU",
        "client CPU",
    ]);
    let mut out = Vec::new();
    let mut set_rate: BTreeMap<usize, Result<f64, String>> = BTreeMap::new();
    for c in [1usize, 50] {
        let server = CpuMeter::start(ctx.redis_pid());
        let r = port
            .clone()
            .and_then(|p| redis_benchmark(p, c, requests.max(c)));
        let server_cpu = server.and_then(|m| m.percent());
        match &r {
            Ok(v) => table.row(vec![
                "redis-benchmark SET".into(),
                c.to_string(),
                rate(*v),
                String::new(),
                "0".into(),
                "1".into(),
                percent(server_cpu),
            ]),
            Err(e) => table.failed_cells(vec!["redis-benchmark SET".into(), c.to_string()], e),
        }
        out.push(match &r {
            Ok(v) => json!({
                "what": "redis-benchmark set", "clients": c, "per_s": v,
                "server_cpu_percent": server_cpu,
            }),
            Err(e) => json!({"what": "redis-benchmark set", "clients": c, "error": e}),
        });
        set_rate.insert(c, r);
    }

    // (store, clients, one backend per client?)
    let configs: Vec<(Result<Store, String>, usize, bool)> = vec![
        (redis.clone(), 1, false),
        (redis.clone(), 50, false),
        (redis, 50, true),
        (Ok(local.clone()), 1, false),
        (Ok(local), 50, false),
    ];
    // The Redis clients run on one thread, as redis-benchmark's do: on a small machine a
    // second client thread would take CPU from the server it measures.
    let single = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("suite: tokio runtime: {e}");
            return;
        }
    };
    let mut c50: BTreeMap<&'static str, Result<f64, String>> = BTreeMap::new();
    for (i, (store, clients, per_client)) in configs.into_iter().enumerate() {
        if interrupted() {
            break;
        }
        let label = store.as_ref().map_or("redis", Store::label);
        let sharing = if per_client {
            "one open() per client"
        } else {
            "one shared open()"
        };
        let what = format!("dlock lock+unlock ({label}, {sharing})");
        eprintln!("   {what}, clients: {clients}");
        let commands_before = match (&store, &port) {
            (Ok(Store::Redis(_)), Ok(p)) => redis_commands(*p),
            _ => None,
        };
        let is_redis = matches!(store, Ok(Store::Redis(_)));
        let server = CpuMeter::start(ctx.redis_pid().filter(|_| is_redis));
        let client = CpuMeter::start(Some(std::process::id()));
        let rt = if is_redis { &single } else { &ctx.rt };
        let r = match &store {
            Ok(store) => rt.block_on(with_timeout(limit, async {
                let mut backends = Vec::with_capacity(clients);
                if per_client {
                    for _ in 0..clients {
                        backends.push(open(store).await?);
                    }
                } else {
                    let b = open(store).await?;
                    backends.resize(clients, b);
                }
                throughput(backends, &i.to_string(), secs).await
            })),
            Err(e) => Err(e.clone()),
        };
        let server_cpu = server.and_then(|m| m.percent());
        let client_cpu = client.and_then(|m| m.percent());
        // Redis commands per lock+unlock cycle (connection set-up included, negligible).
        let per_cycle = match (commands_before, &r, &port) {
            (Some((all0, scripts0)), Ok((_, cycles)), Ok(p)) => {
                redis_commands(*p).map(|(all1, scripts1)| {
                    let n = *cycles as f64;
                    ((scripts1 - scripts0) as f64 / n, (all1 - all0) as f64 / n)
                })
            }
            _ => None,
        };
        let r = r.map(|(per_s, _)| per_s);
        let vs = |v: f64| {
            set_rate
                .get(&clients)
                .and_then(|s| s.as_ref().ok())
                .map(|s| v / s)
        };
        match &r {
            Ok(v) => {
                let shown = if label == "redis" {
                    ratio(vs(*v))
                } else {
                    String::new()
                };
                let (scripts, cmds) = match per_cycle {
                    Some((s, c)) => (format!("{s:.2}"), format!("{c:.2}")),
                    None => (String::new(), String::new()),
                };
                table.row(vec![
                    what.clone(),
                    clients.to_string(),
                    rate(*v),
                    shown,
                    scripts,
                    cmds,
                    percent(server_cpu),
                    percent(client_cpu),
                ]);
                out.push(json!({
                    "what": what, "backend": label, "clients": clients,
                    "open_per_client": per_client, "per_s": v,
                    "vs_set": if label == "redis" { vs(*v) } else { None },
                    "redis_script_calls_per_cycle": per_cycle.map(|p| p.0),
                    "redis_commands_per_cycle": per_cycle.map(|p| p.1),
                    "server_cpu_percent": server_cpu, "client_cpu_percent": client_cpu,
                }));
            }
            Err(e) => {
                table.failed_cells(vec![what.clone(), clients.to_string()], e);
                out.push(json!({
                    "what": what, "backend": label, "clients": clients,
                    "open_per_client": per_client, "error": e,
                }));
            }
        }
        if label == "redis" && clients == 50 {
            let key = if per_client { "per-client" } else { "shared" };
            let v = r.and_then(|v| vs(v).ok_or_else(|| "redis-benchmark -c 50: n/a".to_string()));
            c50.insert(key, v);
        }
    }
    table.print(&format!(
        "4. throughput: lock+unlock cycles/s, each client on its own key (no contention), \
         {secs} s per row; SET: redis-benchmark -n {requests}; per cycle: script calls, and \
         commands run by the server (inside scripts included); CPU: share of one core"
    ));
    ctx.sections.insert(
        "throughput".into(),
        json!({"secs": secs, "requests": requests, "runs": out}),
    );
    for key in ["shared", "per-client"] {
        let v = c50
            .get(key)
            .cloned()
            .unwrap_or_else(|| Err("not measured".into()));
        ctx.target(
            &format!("throughput, 50 clients ({key} open): dlock-redis / SET"),
            "x",
            v,
            Goal::AtLeast(0.4),
        );
    }
}

// ---------------------------------------------------------------------------------------
// 5. RSS and CPU of a holder

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the command: state is field 3, utime 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn section_rss(ctx: &mut Ctx) {
    eprintln!("== holder RSS and CPU");
    let tick_ms = tick_ms();
    let local = ctx.local("rss");
    let redis = ctx.redis();
    let etcd = ctx.etcd();
    let mut holders: Vec<(String, Result<Command, String>)> = Vec::new();
    let mut flock = Command::new("flock");
    flock.arg(ctx.file("rss.flock")).args(["sleep", "5"]);
    holders.push(("flock FILE sleep 5".into(), Ok(flock)));
    for store in [Ok(local), redis] {
        let label = store.as_ref().map_or("redis", Store::label);
        let cmd = store.map(|s| {
            let mut c = ctx.dlock(&s);
            c.args(["exec", "bench-rss", "--", "sleep", "5"]);
            c
        });
        holders.push((format!("dlock exec ({label}) -- sleep 5"), cmd));
    }
    let cmd = etcd.map(|ep| {
        let mut c = etcdctl(&ep);
        c.args(["lock", "bench-rss", "sleep", "5"]);
        c
    });
    holders.push(("etcdctl lock KEY sleep 5".into(), cmd));

    // All holders at once (different stores, so they do not wait for each other).
    let mut guard = Guard(Vec::new());
    let mut started: Vec<(String, Result<usize, String>)> = Vec::new();
    for (name, cmd) in holders {
        let r = cmd.and_then(|mut c| {
            die_with_parent(&mut c)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start: {e}"))
        });
        started.push((
            name,
            r.map(|child| {
                guard.0.push(child);
                guard.0.len() - 1
            }),
        ));
    }
    let t0 = Instant::now();
    let sleep_until = |t: Duration| {
        if let Some(left) = t.checked_sub(t0.elapsed()) {
            std::thread::sleep(left)
        }
    };
    sleep_until(Duration::from_secs(1));
    let first: Vec<Option<(u64, u64)>> = started
        .iter()
        .map(|(_, r)| {
            let pid = guard.0[*r.as_ref().ok()?].id();
            Some((vm_rss_kib(pid)?, cpu_ticks(pid)?))
        })
        .collect();
    sleep_until(Duration::from_secs(3));
    let second: Vec<Option<u64>> = started
        .iter()
        .map(|(_, r)| cpu_ticks(guard.0[*r.as_ref().ok()?].id()))
        .collect();

    let mut table = Table::new(&["holder", "RSS MiB", "CPU ms by 1 s", "CPU ms 1–3 s"]);
    let mut out = Vec::new();
    let mut figures: BTreeMap<String, Result<(f64, f64), String>> = BTreeMap::new();
    for (i, (name, r)) in started.iter().enumerate() {
        let r = match (r, first[i], second[i]) {
            (Err(e), _, _) => Err(e.clone()),
            (Ok(_), Some((rss, c1)), Some(c3)) => Ok((rss, c1, c3)),
            (Ok(idx), _, _) => {
                // It ended early: say why.
                let child = &mut guard.0[*idx];
                let mut err = String::new();
                if let Some(mut p) = child.stderr.take() {
                    let _ = p.read_to_string(&mut err);
                }
                let status = child.wait().ok();
                Err(match status {
                    Some(s) => check(s, &err)
                        .err()
                        .unwrap_or_else(|| "exited before 3 s".into()),
                    None => "exited early".into(),
                })
            }
        };
        let label = if name.contains("(local)") {
            "local"
        } else if name.contains("(redis)") {
            "redis"
        } else {
            ""
        };
        match r {
            Ok((rss, c1, c3)) => {
                let mib = rss as f64 / 1024.0;
                let (cpu1, cpu2) = (c1 as f64 * tick_ms, (c3 - c1) as f64 * tick_ms);
                table.row(vec![name.clone(), format!("{mib:.1}"), ms(cpu1), ms(cpu2)]);
                out.push(json!({
                    "name": name, "rss_kib": rss, "cpu_ms_first_s": cpu1,
                    "cpu_ms_1s_to_3s": cpu2,
                }));
                figures.insert(label.into(), Ok((mib, cpu2)));
            }
            Err(e) => {
                table.failed(name.clone(), &e);
                out.push(json!({"name": name, "error": e}));
                figures.insert(label.into(), Err(e));
            }
        }
    }
    // Let them finish (sleep 5), so that nothing is left holding.
    let deadline = t0 + Duration::from_secs(15);
    for child in &mut guard.0 {
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(guard);
    table.print(&format!(
        "5. a holder's footprint: RSS at 1 s, CPU (utime+stime, {tick_ms} ms ticks) \
         until 1 s and from 1 s to 3 s"
    ));
    ctx.sections.insert("rss".into(), json!({ "holders": out }));
    for label in ["local", "redis"] {
        let v = figures
            .get(label)
            .cloned()
            .unwrap_or_else(|| Err("not measured".into()));
        ctx.target(
            &format!("holder RSS, dlock-{label}"),
            "MiB",
            v.clone().map(|(m, _)| m),
            Goal::Below(10.0),
        );
        ctx.target(
            &format!("holder CPU 1–3 s, dlock-{label}"),
            "ms",
            v.map(|(_, c)| c),
            Goal::AtMost(tick_ms),
        );
    }
}

// ---------------------------------------------------------------------------------------
// 6. status over many held locks

async fn fill(b: Arc<dyn Backend>, n: usize, tasks: usize) -> Result<(), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let holder = bench_holder();
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let (b, next, holder) = (b.clone(), next.clone(), holder.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                if interrupted() {
                    return Err("interrupted".into());
                }
                let key = format!("bench-status-{i:06}");
                let req = request(&holder, &key, Duration::from_secs(3600), true);
                let acq = b
                    .acquire(&req, &WaitOptions::until(Some(Instant::now())))
                    .await
                    .map_err(|e| format!("acquire {key}: {e}"))?;
                drop(acq);
                tokio::task::yield_now().await;
            }
        });
    }
    join_all(set).await
}

fn section_status(ctx: &mut Ctx) {
    let n = ctx.o.locks;
    eprintln!("== status over {n} held locks");
    let mut table = Table::new(&["command", "runs", "median s", "min s", "listed"]);
    let mut out = Map::new();
    out.insert("locks".into(), json!(n));
    // A server of its own, so that the other sections' keys do not count.
    let server = RedisServer::start();
    let created = server.as_ref().map_err(Clone::clone).and_then(|s| {
        let store = Store::Redis(s.url());
        let start = Instant::now();
        ctx.rt
            .block_on(with_timeout(Duration::from_secs(300), async {
                let b = open(&store).await?;
                fill(b, n, 64).await
            }))?;
        Ok((store, start.elapsed()))
    });
    let mut targets = Vec::new();
    match created {
        Err(e) => {
            table.failed(format!("create {n} locks"), &e);
            out.insert("error".into(), json!(e));
            targets.push(("status --json".to_string(), Err(e.clone())));
            targets.push(("status".to_string(), Err(e)));
        }
        Ok((store, took)) => {
            let per_s = n as f64 / took.as_secs_f64();
            println!(
                "\ncreated {n} locks (library, 64 tasks, detached, TTL 1h) in {:.2} s ({} /s)",
                took.as_secs_f64(),
                rate(per_s)
            );
            out.insert(
                "create".into(),
                json!({"seconds": took.as_secs_f64(), "per_s": per_s}),
            );
            for (name, json_flag) in [("status --json", true), ("status", false)] {
                let args: &[&str] = if json_flag {
                    &["--json", "status"]
                } else {
                    &["status"]
                };
                let limit = Duration::from_secs(120);
                // First run: checked, output counted (one line per lock, plus a header
                // for the table); then timed runs with stdout on /dev/null.
                let r = run_checked(ctx.dlock(&store).args(args), limit).and_then(|(_, text)| {
                    let listed = text.lines().filter(|l| !l.trim().is_empty()).count();
                    let mut times = Vec::new();
                    for _ in 0..3 {
                        let (took, status) = run(ctx.dlock(&store).args(args), limit)?;
                        check(status, "")?;
                        times.push(took);
                    }
                    Ok((Stats::of(&times).ok_or("no samples")?, listed))
                });
                match r {
                    Ok((s, listed)) => {
                        table.row(vec![
                            format!("dlock {name} > /dev/null"),
                            s.n.to_string(),
                            format!("{:.3}", s.p50 / 1e3),
                            format!("{:.3}", s.min / 1e3),
                            listed.to_string(),
                        ]);
                        out.insert(name.into(), json!({"stats": s.json(), "lines": listed}));
                        targets.push((name.to_string(), Ok(s.p50 / 1e3)));
                    }
                    Err(e) => {
                        table.failed(format!("dlock {name}"), &e);
                        out.insert(name.into(), json!({ "error": e }));
                        targets.push((name.to_string(), Err(e)));
                    }
                }
            }
        }
    }
    drop(server);
    table.print(&format!(
        "6. status over {n} locks held on Redis (listed: lines of output)"
    ));
    ctx.sections.insert("status".into(), Value::Object(out));
    for (name, v) in targets {
        ctx.target(
            &format!("dlock {name}, {n} locks (redis)"),
            "s",
            v,
            Goal::Below(2.0),
        );
    }
}

// ---------------------------------------------------------------------------------------
// Main

fn tool_version(cmd: &str, args: &[&str]) -> Value {
    match Command::new(cmd).args(args).stdin(Stdio::null()).output() {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            json!(text.lines().next().unwrap_or("").trim())
        }
        Err(_) => Value::Null,
    }
}

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
    });
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "cpu": cpu,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
    })
}

/// Prints the targets with the previous run's figures, and returns them as JSON.
fn report_targets(targets: &[Target], previous: &BTreeMap<String, f64>) -> Value {
    let mut table = Table::new(&["target", "measured", "goal", "verdict", "previous run"]);
    let mut out = Vec::new();
    for t in targets {
        let prev = previous
            .get(&t.name)
            .map_or(String::new(), |v| fmt_value(*v, t.unit));
        match &t.value {
            Ok(v) => {
                let pass = t.goal.check(*v);
                table.row(vec![
                    t.name.clone(),
                    fmt_value(*v, t.unit),
                    t.goal.text(t.unit),
                    if pass { "PASS" } else { "FAIL" }.into(),
                    prev,
                ]);
                out.push(json!({
                    "name": t.name, "unit": t.unit, "value": v,
                    "goal": t.goal.text(t.unit), "pass": pass,
                }));
            }
            Err(e) => {
                table.failed(t.name.clone(), e);
                out.push(json!({
                    "name": t.name, "unit": t.unit, "value": null,
                    "goal": t.goal.text(t.unit), "pass": null, "error": e,
                }));
            }
        }
    }
    table.print("Targets");
    Value::Array(out)
}

fn previous_targets(path: &Path) -> BTreeMap<String, f64> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return BTreeMap::new();
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return BTreeMap::new();
    };
    v["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["name"].as_str()?.to_string(), t["value"].as_f64()?)))
        .collect()
}

fn main() {
    let opts = match Opts::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("suite: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let code = suite(opts);
    std::process::exit(code);
}

type Section = fn(&mut Ctx);

fn suite(o: Opts) -> i32 {
    let started = Instant::now();
    let started_at = SystemTime::now();
    let dlock = PathBuf::from(env!("CARGO_BIN_EXE_dlock"));
    // target/<triple>/release/dlock → target/<triple>/bench
    let out_dir = o.out.clone().unwrap_or_else(|| {
        dlock
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
            .join("bench")
    });
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("suite: tokio runtime: {e}");
            return 70;
        }
    };
    let tmp = match tempfile::Builder::new().prefix("dlock-bench-").tempdir() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("suite: temp dir: {e}");
            return 70;
        }
    };
    let _ = ROOT.set(tmp.path().to_path_buf());
    handle_signals();
    println!(
        "dlock benchmark suite{}: sections {}; binary {}",
        if o.quick { " (--quick)" } else { "" },
        o.only.join(","),
        dlock.display()
    );
    let mut ctx = Ctx {
        o,
        dlock,
        tmp,
        rt,
        redis: None,
        etcd: None,
        sections: Map::new(),
        targets: Vec::new(),
    };
    let sections: [(&str, Section); 6] = [
        ("exec", section_exec),
        ("contention", section_contention),
        ("handoff", section_handoff),
        ("throughput", section_throughput),
        ("rss", section_rss),
        ("status", section_status),
    ];
    let mut timings = Map::new();
    for (name, f) in sections {
        if ctx.o.wants(name) && !interrupted() {
            let t = Instant::now();
            f(&mut ctx);
            timings.insert(name.into(), json!(t.elapsed().as_secs_f64()));
        }
    }

    let latest = out_dir.join("results.json");
    let targets = report_targets(&ctx.targets, &previous_targets(&latest));
    let stamp = humantime::format_rfc3339_seconds(started_at).to_string();
    let results = json!({
        "suite": "dlock",
        "format": 1,
        "started_at": stamp,
        "seconds": started.elapsed().as_secs_f64(),
        "section_seconds": timings,
        "interrupted": interrupted(),
        "options": ctx.o.json(),
        "dlock": {
            "version": env!("CARGO_PKG_VERSION"),
            "commit": git(&["rev-parse", "HEAD"]),
            "dirty": git(&["status", "--porcelain"]).map(|s| !s.is_empty()),
        },
        "machine": machine(),
        "tools": {
            "flock": tool_version("flock", &["--version"]),
            "etcd": tool_version("etcd", &["--version"]),
            "redis-server": tool_version("redis-server", &["--version"]),
        },
        "sections": ctx.sections,
        "targets": targets,
    });
    let stamped = out_dir.join(format!("results-{}.json", stamp.replace([':', '-'], "")));
    let text = serde_json::to_string_pretty(&results).unwrap_or_default() + "\n";
    // An interrupted run is kept, but does not replace the latest complete one.
    let written = std::fs::create_dir_all(&out_dir)
        .and_then(|_| std::fs::write(&stamped, &text))
        .and_then(|_| match interrupted() {
            true => Ok(()),
            false => std::fs::write(&latest, &text),
        });
    match written {
        Ok(()) if interrupted() => println!("\nresults (interrupted): {}", stamped.display()),
        Ok(()) => println!(
            "\nresults: {} (and {}); {:.0} s",
            latest.display(),
            stamped.display(),
            started.elapsed().as_secs_f64()
        ),
        Err(e) => eprintln!("suite: cannot write {}: {e}", stamped.display()),
    }
    drop(ctx); // servers killed, temp dirs removed
    if interrupted() {
        130
    } else {
        0
    }
}
