//! Section 2, contention: N processes each running M × `CMD` in sequence on one key, for flock(1)
//! and `dlock exec` on each store; and, in a table of its own, 8 processes on one etcd for
//! `etcdctl lock` and `dlock exec` (each cycle is three Raft writes there, so fewer cycles).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{current_of, spread, MakeCmd, Stats, BASELINE};
use crate::procs::{interrupted, run, run_checked, status_error};
use crate::report::{ms, rate, ratio, Goal, Section, Table, Versus};
use crate::{dlock_cmd, Ctx};

struct Contention {
    cycles: usize,
    elapsed: Duration,
    stats: Stats,
}

impl Contention {
    fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs of each contention row, interleaved with the other rows. Seven: with three, the
/// median of one 8-process row still moved between two runs by more than the noise we accept
/// (figures: benches/RESULTS.md).
const CONTENTION_ROUNDS: usize = 7;

/// Each round's rate, `None` for a round that failed.
fn rates(runs: &[Result<Contention, String>]) -> Vec<Option<f64>> {
    runs.iter()
        .map(|r| r.as_ref().ok().map(Contention::rate))
        .collect()
}

/// Each round's rate over flock's (or the baseline's) rate in the same round, as (median,
/// min, max); `None` when no round of both ran.
fn paired_ratios(runs: &[Option<f64>], flock: &[Option<f64>]) -> Option<(f64, f64, f64)> {
    spread(runs.iter().zip(flock).map(|(a, f)| Some(((*a)?, (*f)?))))
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

type Peers = Vec<(String, Result<MakeCmd, String>)>;

/// flock first (every row is compared with it), then `dlock exec` on each store.
fn peers(ctx: &mut Ctx) -> Peers {
    let local = ctx.local("contention");
    let redis = ctx.redis();
    let memcached = ctx.memcached();
    let cluster = ctx.redis_cluster();
    let postgres = ctx.postgres().map(|(store, _)| store);
    let mysql = ctx.mysql().map(|(store, _)| store);
    let zookeeper = ctx.zookeeper();
    let lockfile = ctx.file("contention.flock");
    let mut peers: Peers = Vec::new();
    peers.push((
        "flock FILE true".into(),
        Ok(Box::new(move || {
            let mut c = Command::new("flock");
            c.arg(&lockfile).arg("true");
            c
        })),
    ));
    let mut stores: Vec<_> = [
        ("local", Ok(local)),
        ("redis", redis),
        ("redis-cluster", cluster),
        ("memcached", memcached),
        ("postgres", postgres),
        ("mysql", mysql),
        ("zookeeper", zookeeper),
    ]
    .map(|(label, store)| ("dlock", ctx.dlock.clone(), label, store))
    .into();
    // The baseline runs beside this binary on every store: a change in one store's
    // statements shows only there.
    if let Some(base) = &ctx.o.baseline {
        let same: Vec<_> = stores
            .iter()
            .map(|(_, _, label, store)| (BASELINE, base.clone(), *label, store.clone()))
            .collect();
        stores.extend(same);
    }
    for (who, bin, label, store) in stores {
        let name = format!("{who} exec ({label})");
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
    peers
}

/// `--baseline`: each baseline row's cycles/s against this binary's, round by round.
fn against_baseline(
    v: &mut Versus,
    peers: &Peers,
    runs: &[Vec<Result<Contention, String>>],
    nm: &str,
) {
    let rates_of = |name: &str| {
        let i = peers.iter().position(|(n, _)| n == name)?;
        Some(rates(&runs[i]))
    };
    for (name, _) in peers {
        let Some(cur) = current_of(name) else {
            continue;
        };
        if let (Some(a), Some(b)) = (rates_of(&cur), rates_of(name)) {
            v.add(&format!("{nm} {cur}"), "cycles/s", paired_ratios(&a, &b));
        }
    }
}

/// `etcdctl lock` first (the etcd rows are compared with it), then `dlock exec` on the same
/// etcd and key.
fn etcd_peers(ctx: &mut Ctx) -> Peers {
    let key = "bench-contention";
    let etcdctl: Result<MakeCmd, String> = ctx.etcd().map(|ep| -> MakeCmd {
        Box::new(move || {
            let mut c = crate::servers::etcdctl(&ep);
            c.args(["lock", key, "true"]);
            c
        })
    });
    let bin = ctx.dlock.clone();
    let dlock = ctx.etcd_store().map(|store| -> MakeCmd {
        Box::new(move || {
            let mut c = dlock_cmd(&bin, &store);
            c.args(["exec", key, "--", "true"]);
            c
        })
    });
    [
        ("etcdctl lock".to_string(), etcdctl),
        ("dlock exec (etcd)".into(), dlock),
    ]
    .into_iter()
    .map(|(name, make)| {
        let make = make.and_then(|f| run_checked(&mut f(), Duration::from_secs(30)).map(|_| f));
        (name, make)
    })
    .collect()
}

/// `flock -s` first (the sharing rows are compared with it), then `dlock exec --limit 4`
/// and `dlock exec --shared` on the local store and Redis: 8 processes, one key, several
/// holders at once.
fn sharing_peers(ctx: &mut Ctx) -> Peers {
    let lockfile = ctx.file("contention-shared.flock");
    let mut peers: Peers = vec![(
        "flock -s FILE true".into(),
        Ok(Box::new(move || {
            let mut c = Command::new("flock");
            c.arg("-s").arg(&lockfile).arg("true");
            c
        })),
    )];
    let local = ctx.local("contention-sharing");
    let redis = ctx.redis();
    let stores = [("local", Ok(local)), ("redis", redis)];
    let modes = [
        ("--limit 4", &["--limit", "4"][..]),
        ("--shared", &["--shared"][..]),
    ];
    for ((name, store), (label, how)) in stores
        .iter()
        .flat_map(|s| modes.iter().map(move |m| (s, m)))
    {
        let how: &'static [&'static str] = how;
        let bin = ctx.dlock.clone();
        let make = store.clone().map(|store| -> MakeCmd {
            Box::new(move || {
                let mut c = dlock_cmd(&bin, &store);
                c.arg("exec")
                    .args(how)
                    .args(["bench-sharing", "--", "true"]);
                c
            })
        });
        let make = make.and_then(|f| run_checked(&mut f(), Duration::from_secs(30)).map(|_| f));
        peers.push((format!("dlock exec {label} ({name})"), make));
    }
    peers
}

/// The sharing table: 8 processes on one key, each holder beside others.
fn sharing_rows(ctx: &mut Ctx, rounds: usize) -> Rows {
    let peers = sharing_peers(ctx);
    let mut rows = Rows::new("vs flock -s", "rounds vs flock -s");
    let n = 8;
    let m = ctx.o.cycles.div_ceil(n).max(1);
    let runs = rounds_of(&peers, n, m, rounds);
    rows.add(&peers, n, m, runs);
    rows
}

/// What the rows add up to: the table, the JSON's runs, and each peer's ratio to flock
/// with 8 processes (the target).
struct Rows {
    table: Table,
    out: Vec<Value>,
    at8: BTreeMap<String, Result<f64, String>>,
}

impl Rows {
    /// No rows yet, in a table whose last two columns (`vs PEER`, `rounds vs PEER`)
    /// hold the ratios to the peer's runs.
    fn new(vs: &'static str, rounds: &'static str) -> Rows {
        let table = Table::new(&[
            "N × M", "command", "cycles/s", "p50 ms", "p99 ms", "max ms", vs, rounds,
        ])
        .text_cols(2);
        Rows {
            table,
            out: Vec::new(),
            at8: BTreeMap::new(),
        }
    }
}

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== contention");
    let peers = peers(ctx);
    let mut rows = Rows::new("vs flock", "rounds vs flock");
    // A row takes about half a second, so one run of it swings with whatever else the
    // machine does: each row is run several times, interleaved with its peers, and the
    // run with the median rate is reported.
    let rounds = if ctx.o.quick { 1 } else { CONTENTION_ROUNDS };
    let mut versus = Versus::new();
    for n in [2usize, 8, 32] {
        let m = ctx.o.cycles.div_ceil(n).max(1);
        let runs = rounds_of(&peers, n, m, rounds);
        against_baseline(&mut versus, &peers, &runs, &format!("{n} × {m}"));
        rows.add(&peers, n, m, runs);
    }
    let etcd = etcd_rows(ctx, rounds);
    let sharing = sharing_rows(ctx, rounds);
    let mut section = Section::default();
    section.table(
        "2. contention: N processes each running M × `CMD` in sequence on one key \
         (p50/p99/max: wall time per invocation, waiting included; vs flock: median of \
         the rounds' ratios to the flock run beside them, and their range)",
        rows.table,
    );
    section.table(
        "2b. contention on etcd: 8 processes, one key (vs etcdctl: median of the rounds' \
         ratios to the `etcdctl lock` run beside them, and their range)",
        etcd.table,
    );
    section.table(
        "2c. several holders at once: 8 processes, one key, `--limit 4` and `--shared` \
         (vs flock -s: median of the rounds' ratios to the `flock -s` run beside them)",
        sharing.table,
    );
    section.json = Some(json!({
        "runs": rows.out, "etcd_runs": etcd.out, "sharing_runs": sharing.out,
    }));
    versus.finish(&mut section, "2d. contention (table 2)");
    let v = etcd
        .at8
        .get("dlock exec (etcd)")
        .cloned()
        .unwrap_or_else(|| Err("not measured".into()));
    section.target(
        "contention N=8 on etcd: dlock / etcdctl lock cycles/s",
        "x",
        v,
        Goal::AtLeast(5.0),
    );
    for label in ["local", "redis"] {
        let name = format!("dlock exec ({label})");
        let v = rows
            .at8
            .get(&name)
            .cloned()
            .unwrap_or_else(|| Err("not measured".into()));
        section.target(
            &format!("contention N=8: dlock-{label} / flock cycles/s"),
            "x",
            v,
            Goal::AtLeast(0.8),
        );
    }
    section
}

/// The etcd table: 8 processes, a quarter of the cycles of the other rows.
fn etcd_rows(ctx: &mut Ctx, rounds: usize) -> Rows {
    let peers = etcd_peers(ctx);
    let mut rows = Rows::new("vs etcdctl", "rounds vs etcdctl");
    let n = 8;
    let m = (ctx.o.cycles / 4).div_ceil(n).max(1);
    let runs = rounds_of(&peers, n, m, rounds.min(3));
    rows.add(&peers, n, m, runs);
    rows
}

/// Each peer's runs of one row, the peers taking turns round by round.
fn rounds_of(
    peers: &Peers,
    n: usize,
    m: usize,
    rounds: usize,
) -> Vec<Vec<Result<Contention, String>>> {
    let mut runs: Vec<Vec<Result<Contention, String>>> = peers.iter().map(|_| Vec::new()).collect();
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
    runs
}

impl Rows {
    /// One row per peer for `n` processes × `m` commands.
    fn add(
        &mut self,
        peers: &Peers,
        n: usize,
        m: usize,
        runs: Vec<Vec<Result<Contention, String>>>,
    ) {
        // The first peer (flock, or etcdctl for the etcd rows) is what every row is
        // compared with, round by round.
        let flock_rates = runs.first().map(|r| rates(r)).unwrap_or_default();
        for ((name, _), runs) in peers.iter().zip(runs) {
            let label = format!("{n} × {m}");
            let paired = paired_ratios(&rates(&runs), &flock_rates);
            let Some(r) = median_run(runs) else { break };
            let vs = match r {
                Ok(c) => Ok(self.row(label, name, n, m, &c, paired)),
                Err(e) => {
                    self.table.failed_cells(vec![label, name.clone()], &e);
                    self.out
                        .push(json!({"n": n, "m": m, "name": name, "error": e}));
                    Err(e)
                }
            };
            if n == 8 {
                let vs = vs.and_then(|vs| vs.ok_or_else(|| "flock: n/a".to_string()));
                self.at8.insert(name.clone(), vs);
            }
        }
    }

    /// A measured row; returns its ratio to flock.
    fn row(
        &mut self,
        label: String,
        name: &str,
        n: usize,
        m: usize,
        c: &Contention,
        paired: Option<(f64, f64, f64)>,
    ) -> Option<f64> {
        let per_s = c.rate();
        let vs = paired.map(|(median, _, _)| median);
        let spread = paired.map_or_else(
            || "n/a".to_string(),
            |(_, lo, hi)| format!("{lo:.2}–{hi:.2}"),
        );
        self.table.row(vec![
            label,
            name.to_string(),
            rate(per_s),
            ms(c.stats.p50),
            ms(c.stats.p99),
            ms(c.stats.max),
            ratio(vs),
            spread,
        ]);
        self.out.push(json!({
            "n": n, "m": m, "name": name, "cycles": c.cycles,
            "elapsed_s": c.elapsed.as_secs_f64(), "cycles_per_s": per_s,
            "per_invocation": c.stats.json(), "vs_flock": vs,
            "vs_flock_rounds": paired.map(|(_, lo, hi)| json!({"min": lo, "max": hi})),
        }));
        vs
    }
}
