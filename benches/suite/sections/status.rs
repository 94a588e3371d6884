//! Section 6, status over many held locks: `dlock status` and `dlock --json status` listing every
//! lock held on a Redis server of the section's own.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::{Backend, WaitOptions};
use serde_json::{json, Map, Value};
use tokio::task::JoinSet;

use super::{bench_holder, join_all, open, request, spread, with_timeout, Stats};
use crate::procs::{check, interrupted, run, run_checked};
use crate::report::{rate, Goal, Section, Table, Versus};
use crate::servers::Redis;
use crate::{dlock_cmd, Ctx, Store};

/// Holds `n` locks through `tasks` concurrent tasks.
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

type Targets = Vec<(String, Result<f64, String>)>;

/// Per binary: the lines its first run printed, and the times of the runs after it.
type Listing = Result<(usize, Vec<Duration>), String>;

pub fn measure(ctx: &mut Ctx) -> Section {
    let n = ctx.o.locks;
    eprintln!("== status over {n} held locks");
    let mut section = Section::default();
    let mut table = Table::new(&["command", "runs", "median s", "min s", "listed"]);
    let mut out = Map::new();
    out.insert("locks".into(), json!(n));
    // A server of its own, so that the other sections' keys do not count.
    let server = Redis::start();
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
    let mut versus = Versus::new();
    match created {
        Err(e) => {
            table.failed(format!("create {n} locks"), &e);
            out.insert("error".into(), json!(e));
            targets.push(("status --json".to_string(), Err(e.clone())));
            targets.push(("status".to_string(), Err(e)));
        }
        Ok((store, took)) => {
            let per_s = n as f64 / took.as_secs_f64();
            section.line(format!(
                "\ncreated {n} locks (library, 64 tasks, detached, TTL 1h) in {:.2} s ({} /s)",
                took.as_secs_f64(),
                rate(per_s)
            ));
            out.insert(
                "create".into(),
                json!({"seconds": took.as_secs_f64(), "per_s": per_s}),
            );
            for (name, json_flag) in [("status --json", true), ("status", false)] {
                list(
                    ctx,
                    &store,
                    (name, json_flag),
                    &mut table,
                    &mut out,
                    &mut targets,
                    &mut versus,
                );
            }
        }
    }
    drop(server);
    section.table(
        format!("6. status over {n} locks held on Redis (listed: lines of output)"),
        table,
    );
    section.json = Some(Value::Object(out));
    versus.finish(&mut section, "6b. status (3 rounds)");
    for (name, v) in targets {
        section.target(
            &format!("dlock {name}, {n} locks (redis)"),
            "s",
            v,
            Goal::Below(2.0),
        );
    }
    section
}

/// Times `dlock [--json] status` over the held locks: one row per binary, the binaries
/// taking turns.
fn list(
    ctx: &Ctx,
    store: &Store,
    (name, json_flag): (&str, bool),
    table: &mut Table,
    out: &mut Map<String, Value>,
    targets: &mut Targets,
    versus: &mut Versus,
) {
    let args: &[&str] = if json_flag {
        &["--json", "status"]
    } else {
        &["status"]
    };
    let bins = ctx.binaries();
    let runs = time_each(&bins, store, args);
    let secs = |r: &Listing, i: usize| Some(r.as_ref().ok()?.1.get(i)?.as_secs_f64());
    if let [cur, base] = &runs[..] {
        versus.add(
            &format!("dlock {name}"),
            "wall s",
            spread((0..3).map(|i| Some((secs(cur, i)?, secs(base, i)?)))),
        );
    }
    for ((who, _), r) in bins.iter().zip(runs) {
        let r = r.and_then(|(listed, times)| Ok((Stats::of(&times).ok_or("no samples")?, listed)));
        let key = match *who {
            "dlock" => name.to_string(),
            _ => format!("{name} (baseline)"),
        };
        let v = match r {
            Ok((s, listed)) => {
                table.row(vec![
                    format!("{who} {name} > /dev/null"),
                    s.n.to_string(),
                    format!("{:.3}", s.p50 / 1e3),
                    format!("{:.3}", s.min / 1e3),
                    listed.to_string(),
                ]);
                out.insert(key, json!({"stats": s.json(), "lines": listed}));
                Ok(s.p50 / 1e3)
            }
            Err(e) => {
                table.failed(format!("{who} {name}"), &e);
                out.insert(key, json!({ "error": e }));
                Err(e)
            }
        };
        if *who == "dlock" {
            targets.push((name.to_string(), v));
        }
    }
}

/// Runs `dlock ARGS` with each binary: first checked, its lines counted (one per lock, plus
/// a header for the table); then 3 timed runs with stdout on /dev/null, the binaries taking
/// turns.
fn time_each(bins: &[(&str, PathBuf)], store: &Store, args: &[&str]) -> Vec<Listing> {
    let limit = Duration::from_secs(120);
    let mut runs: Vec<Listing> = bins
        .iter()
        .map(|(_, bin)| {
            let (_, text) = run_checked(dlock_cmd(bin, store).args(args), limit)?;
            let listed = text.lines().filter(|l| !l.trim().is_empty()).count();
            Ok((listed, Vec::new()))
        })
        .collect();
    for _ in 0..3 {
        for ((_, bin), r) in bins.iter().zip(runs.iter_mut()) {
            if r.is_err() {
                continue;
            }
            let took = run(dlock_cmd(bin, store).args(args), limit)
                .and_then(|(took, status)| check(status, "").map(|_| took));
            match (took, r.as_mut()) {
                (Ok(took), Ok((_, times))) => times.push(took),
                (Err(e), _) => *r = Err(e),
                _ => {}
            }
        }
    }
    runs
}
