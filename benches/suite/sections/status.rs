//! Section 6, status over many held locks: `dlock status` and `dlock --json status` listing every
//! lock held on a Redis server of the section's own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::{Backend, WaitOptions};
use serde_json::{json, Map, Value};
use tokio::task::JoinSet;

use super::{bench_holder, join_all, open, request, with_timeout, Stats};
use crate::procs::{check, interrupted, run, run_checked};
use crate::report::{rate, Goal, Section, Table};
use crate::servers::Redis;
use crate::{Ctx, Store};

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

/// Times `dlock [--json] status` over the held locks: one row.
fn list(
    ctx: &Ctx,
    store: &Store,
    (name, json_flag): (&str, bool),
    table: &mut Table,
    out: &mut Map<String, Value>,
    targets: &mut Targets,
) {
    let args: &[&str] = if json_flag {
        &["--json", "status"]
    } else {
        &["status"]
    };
    let limit = Duration::from_secs(120);
    // First run: checked, output counted (one line per lock, plus a header
    // for the table); then timed runs with stdout on /dev/null.
    let r = run_checked(ctx.dlock(store).args(args), limit).and_then(|(_, text)| {
        let listed = text.lines().filter(|l| !l.trim().is_empty()).count();
        let mut times = Vec::new();
        for _ in 0..3 {
            let (took, status) = run(ctx.dlock(store).args(args), limit)?;
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
