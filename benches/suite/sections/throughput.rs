//! Section 4, throughput: lock+unlock cycles per second through the library, each client on its
//! own key, next to `redis-benchmark` SET.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::Backend;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::{bench_holder, cycle, join_all, open, with_timeout, CpuMeter};
use crate::procs::{interrupted, run_checked};
use crate::report::{rate, ratio, short, Goal, Section, Table};
use crate::{Ctx, Store};

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

fn percent(p: Option<f64>) -> String {
    p.map_or(String::new(), |p| format!("{p:.0}%"))
}

/// One configuration of the library: a store, its number of clients, and whether each
/// client opens the backend for itself.
struct Config {
    store: Result<Store, String>,
    clients: usize,
    per_client: bool,
    tag: usize,
}

impl Config {
    fn label(&self) -> &'static str {
        self.store.as_ref().map_or("redis", Store::label)
    }

    fn what(&self) -> String {
        let sharing = if self.per_client {
            "one open() per client"
        } else {
            "one shared open()"
        };
        format!("dlock lock+unlock ({}, {sharing})", self.label())
    }
}

/// What one configuration measured.
struct Measured {
    per_s: Result<f64, String>,
    /// Redis script calls and commands per cycle.
    per_cycle: Option<(f64, f64)>,
    server_cpu: Option<f64>,
    client_cpu: Option<f64>,
}

/// The table, the JSON's runs, and SET's rate by number of clients.
struct Rows {
    table: Table,
    out: Vec<Value>,
    set_rate: BTreeMap<usize, Result<f64, String>>,
}

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== throughput");
    let (secs, requests) = (ctx.o.secs, ctx.o.requests);
    let redis = ctx.redis();
    let port = ctx.redis_port();
    let local = ctx.local("throughput");
    // Redlock beside one server, one client: what the quorum costs per cycle.
    let redlock = ctx.redlock();
    let table = Table::new(&[
        "what",
        "clients",
        "ops/s",
        "vs SET",
        "scripts/cycle",
        "cmds/cycle",
        "server CPU",
        "client CPU",
    ]);
    let mut rows = Rows {
        table,
        out: Vec::new(),
        set_rate: BTreeMap::new(),
    };
    for c in [1usize, 50] {
        rows.set(ctx, &port, c, requests);
    }
    let configs = [
        (redis.clone(), 1, false),
        (redis.clone(), 50, false),
        (redis, 50, true),
        (redlock, 1, false),
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
            return Section::default();
        }
    };
    let mut c50: BTreeMap<&'static str, Result<f64, String>> = BTreeMap::new();
    for (tag, (store, clients, per_client)) in configs.into_iter().enumerate() {
        if interrupted() {
            break;
        }
        let config = Config {
            store,
            clients,
            per_client,
            tag,
        };
        let measured = run(ctx, &single, &port, &config);
        let vs = rows.library(&config, measured);
        if config.label() == "redis" && clients == 50 {
            c50.insert(if per_client { "per-client" } else { "shared" }, vs);
        }
    }
    finish(rows, c50, secs, requests)
}

fn finish(
    rows: Rows,
    c50: BTreeMap<&'static str, Result<f64, String>>,
    secs: f64,
    requests: usize,
) -> Section {
    let mut section = Section::default();
    section.table(
        format!(
            "4. throughput: lock+unlock cycles/s, each client on its own key (no contention), \
             {secs} s per row; SET: redis-benchmark -n {requests}; per cycle: script calls, and \
             commands run by the server (inside scripts included); CPU: share of one core"
        ),
        rows.table,
    );
    section.json = Some(json!({"secs": secs, "requests": requests, "runs": rows.out}));
    for key in ["shared", "per-client"] {
        let v = c50
            .get(key)
            .cloned()
            .unwrap_or_else(|| Err("not measured".into()));
        section.target(
            &format!("throughput, 50 clients ({key} open): dlock-redis / SET"),
            "x",
            v,
            Goal::AtLeast(0.4),
        );
    }
    section
}

/// Runs one configuration of the library, with the server's and the suite's CPU, and
/// the Redis commands per cycle.
fn run(
    ctx: &Ctx,
    single: &tokio::runtime::Runtime,
    port: &Result<u16, String>,
    config: &Config,
) -> Measured {
    let (secs, clients) = (ctx.o.secs, config.clients);
    let limit = Duration::from_secs_f64(secs + 30.0);
    eprintln!("   {}, clients: {clients}", config.what());
    let is_redis = matches!(config.store, Ok(Store::Redis(_)));
    let commands_before = match port {
        Ok(p) if is_redis => redis_commands(*p),
        _ => None,
    };
    let server = CpuMeter::start(ctx.redis_pid().filter(|_| is_redis));
    let client = CpuMeter::start(Some(std::process::id()));
    let rt = if is_redis { single } else { &ctx.rt };
    let r = match &config.store {
        Ok(store) => rt.block_on(with_timeout(limit, async {
            let mut backends = Vec::with_capacity(clients);
            if config.per_client {
                for _ in 0..clients {
                    backends.push(open(store).await?);
                }
            } else {
                let b = open(store).await?;
                backends.resize(clients, b);
            }
            throughput(backends, &config.tag.to_string(), secs).await
        })),
        Err(e) => Err(e.clone()),
    };
    let server_cpu = server.and_then(|m| m.percent());
    let client_cpu = client.and_then(|m| m.percent());
    // Redis commands per lock+unlock cycle (connection set-up included, negligible).
    let per_cycle = match (commands_before, &r, port) {
        (Some((all0, scripts0)), Ok((_, cycles)), Ok(p)) => {
            redis_commands(*p).map(|(all1, scripts1)| {
                let n = *cycles as f64;
                ((scripts1 - scripts0) as f64 / n, (all1 - all0) as f64 / n)
            })
        }
        _ => None,
    };
    Measured {
        per_s: r.map(|(per_s, _)| per_s),
        per_cycle,
        server_cpu,
        client_cpu,
    }
}

impl Rows {
    /// The redis-benchmark SET row for `c` clients.
    fn set(&mut self, ctx: &Ctx, port: &Result<u16, String>, c: usize, requests: usize) {
        let server = CpuMeter::start(ctx.redis_pid());
        let r = port
            .clone()
            .and_then(|p| redis_benchmark(p, c, requests.max(c)));
        let server_cpu = server.and_then(|m| m.percent());
        let what = "redis-benchmark SET";
        match &r {
            Ok(v) => {
                let cells = [what, &c.to_string(), &rate(*v), "", "0", "1"];
                let mut cells: Vec<String> = cells.iter().map(|s| s.to_string()).collect();
                cells.push(percent(server_cpu));
                self.table.row(cells);
                self.out.push(json!({
                    "what": "redis-benchmark set", "clients": c, "per_s": v,
                    "server_cpu_percent": server_cpu,
                }));
            }
            Err(e) => {
                self.table.failed_cells(vec![what.into(), c.to_string()], e);
                self.out
                    .push(json!({"what": "redis-benchmark set", "clients": c, "error": e}));
            }
        }
        self.set_rate.insert(c, r);
    }

    /// A library row; returns its ratio to SET with as many clients (for Redis).
    fn library(&mut self, config: &Config, m: Measured) -> Result<f64, String> {
        let (label, what, clients) = (config.label(), config.what(), config.clients);
        let vs = |v: f64| {
            let set = self.set_rate.get(&clients);
            set.and_then(|s| s.as_ref().ok()).map(|s| v / s)
        };
        match &m.per_s {
            Ok(v) => {
                let redis_vs = if label == "redis" { vs(*v) } else { None };
                let (scripts, cmds) = match m.per_cycle {
                    Some((s, c)) => (format!("{s:.2}"), format!("{c:.2}")),
                    None => (String::new(), String::new()),
                };
                let shown = if label == "redis" {
                    ratio(redis_vs)
                } else {
                    String::new()
                };
                let row = vec![
                    what.clone(),
                    clients.to_string(),
                    rate(*v),
                    shown,
                    scripts,
                    cmds,
                    percent(m.server_cpu),
                    percent(m.client_cpu),
                ];
                self.out.push(json!({
                    "what": what, "backend": label, "clients": clients,
                    "open_per_client": config.per_client, "per_s": v, "vs_set": redis_vs,
                    "redis_script_calls_per_cycle": m.per_cycle.map(|p| p.0),
                    "redis_commands_per_cycle": m.per_cycle.map(|p| p.1),
                    "server_cpu_percent": m.server_cpu, "client_cpu_percent": m.client_cpu,
                }));
                self.table.row(row);
            }
            Err(e) => {
                self.table
                    .failed_cells(vec![what.clone(), clients.to_string()], e);
                self.out.push(json!({
                    "what": what, "backend": label, "clients": clients,
                    "open_per_client": config.per_client, "error": e,
                }));
            }
        }
        let no_set = || format!("redis-benchmark -c {clients}: n/a");
        m.per_s.and_then(|v| vs(v).ok_or_else(no_set))
    }
}
