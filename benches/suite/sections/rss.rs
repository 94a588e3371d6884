//! Section 5, a holder's footprint: the RSS and CPU of `dlock exec KEY -- sleep 5` while it holds,
//! next to flock(1) and `etcdctl lock`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{cpu_ticks, current_of, spread, tick_ms, vm_rss_kib, BASELINE};
use crate::procs::{check, die_with_parent, Guard};
use crate::report::{ms, Goal, Section, Table, Versus};
use crate::servers::etcdctl;
use crate::{dlock_cmd, Ctx, Store};

type Holders = Vec<(String, Result<Command, String>)>;

/// Each holder's name, and its index in the guard once started.
type Started = Vec<(String, Result<usize, String>)>;

/// What was read of one holder: RSS (KiB) and CPU ticks at 1 s, CPU ticks at 3 s.
type Reading = Result<(u64, u64, u64), String>;

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== holder RSS and CPU");
    let tick_ms = tick_ms();
    let holders = holders(ctx);
    // All holders at once (different stores, so they do not wait for each other).
    let (mut guard, started) = start(holders);
    let t0 = Instant::now();
    let readings = read(&mut guard, &started, t0);

    let mut table = Table::new(&["holder", "RSS MiB", "CPU ms by 1 s", "CPU ms 1–3 s"]);
    let mut out = Vec::new();
    let mut figures: BTreeMap<String, Result<(f64, f64), String>> = BTreeMap::new();
    let mut rss = BTreeMap::new();
    for ((name, _), r) in started.iter().zip(readings) {
        let label = if name.starts_with("dlock exec (local)") {
            "local"
        } else if name.starts_with("dlock exec (redis)") {
            "redis"
        } else {
            ""
        };
        let figure = row(&mut table, &mut out, name, r, tick_ms);
        rss.insert(name.clone(), figure.as_ref().ok().map(|f| f.0));
        figures.insert(label.into(), figure);
    }
    // Let them finish (sleep 5), so that nothing is left holding.
    let deadline = t0 + Duration::from_secs(15);
    for child in &mut guard.0 {
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(guard);
    let mut section = Section::default();
    section.table(
        format!(
            "5. a holder's footprint: RSS at 1 s, CPU (utime+stime, {tick_ms} ms ticks) \
             until 1 s and from 1 s to 3 s"
        ),
        table,
    );
    section.json = Some(json!({ "holders": out }));
    let mut versus = Versus::new();
    for name in rss.keys() {
        let Some(cur) = current_of(name) else {
            continue;
        };
        let pair = |cur: &String| Some((rss.get(cur).copied()??, rss.get(name).copied()??));
        versus.add(&cur, "RSS MiB", spread([pair(&cur)]));
    }
    versus.finish(&mut section, "5b. a holder's footprint (one reading)");
    targets(&mut section, &figures, tick_ms);
    section
}

/// The commands that hold a lock for 5 s.
fn holders(ctx: &mut Ctx) -> Holders {
    let local = ctx.local("rss");
    let redis = ctx.redis();
    let etcd = ctx.etcd();
    let mut holders: Holders = Vec::new();
    let mut flock = Command::new("flock");
    flock.arg(ctx.file("rss.flock")).args(["sleep", "5"]);
    holders.push(("flock FILE sleep 5".into(), Ok(flock)));
    let exec = |who: &str, bin: &Path, key: &str, store: Result<Store, String>| {
        let label = store.as_ref().map_or("redis", Store::label);
        let cmd = store.map(|s| {
            let mut c = dlock_cmd(bin, &s);
            c.args(["exec", key, "--", "sleep", "5"]);
            c
        });
        (format!("{who} exec ({label}) -- sleep 5"), cmd)
    };
    for store in [Ok(local.clone()), redis.clone()] {
        holders.push(exec("dlock", &ctx.dlock, "bench-rss", store));
    }
    let cmd = etcd.map(|ep| {
        let mut c = etcdctl(&ep);
        c.args(["lock", "bench-rss", "sleep", "5"]);
        c
    });
    holders.push(("etcdctl lock KEY sleep 5".into(), cmd));
    // Another key, so that the baseline holds beside this binary instead of waiting.
    if let Some(base) = &ctx.o.baseline {
        for store in [Ok(local), redis] {
            holders.push(exec(BASELINE, base, "bench-rss-baseline", store));
        }
    }
    holders
}

fn start(holders: Holders) -> (Guard, Started) {
    let mut guard = Guard(Vec::new());
    let mut started: Started = Vec::new();
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
    (guard, started)
}

/// Reads each holder's RSS and CPU at 1 s, and its CPU again at 3 s.
fn read(guard: &mut Guard, started: &Started, t0: Instant) -> Vec<Reading> {
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
    started
        .iter()
        .enumerate()
        .map(|(i, (_, r))| match (r, first[i], second[i]) {
            (Err(e), _, _) => Err(e.clone()),
            (Ok(_), Some((rss, c1)), Some(c3)) => Ok((rss, c1, c3)),
            (Ok(idx), _, _) => Err(ended_early(guard, *idx)),
        })
        .collect()
}

/// Why a holder ended before it was read.
fn ended_early(guard: &mut Guard, idx: usize) -> String {
    let child = &mut guard.0[idx];
    let mut err = String::new();
    if let Some(mut p) = child.stderr.take() {
        let _ = p.read_to_string(&mut err);
    }
    match child.wait().ok() {
        Some(s) => check(s, &err)
            .err()
            .unwrap_or_else(|| "exited before 3 s".into()),
        None => "exited early".into(),
    }
}

/// One holder's row; returns its RSS (MiB) and CPU from 1 s to 3 s (ms).
fn row(
    table: &mut Table,
    out: &mut Vec<Value>,
    name: &str,
    r: Reading,
    tick_ms: f64,
) -> Result<(f64, f64), String> {
    match r {
        Ok((rss, c1, c3)) => {
            let mib = rss as f64 / 1024.0;
            let (cpu1, cpu2) = (c1 as f64 * tick_ms, (c3 - c1) as f64 * tick_ms);
            table.row(vec![name.into(), format!("{mib:.1}"), ms(cpu1), ms(cpu2)]);
            out.push(json!({
                "name": name, "rss_kib": rss, "cpu_ms_first_s": cpu1,
                "cpu_ms_1s_to_3s": cpu2,
            }));
            Ok((mib, cpu2))
        }
        Err(e) => {
            table.failed(name, &e);
            out.push(json!({"name": name, "error": e}));
            Err(e)
        }
    }
}

fn targets(
    section: &mut Section,
    figures: &BTreeMap<String, Result<(f64, f64), String>>,
    tick_ms: f64,
) {
    for label in ["local", "redis"] {
        let v = figures
            .get(label)
            .cloned()
            .unwrap_or_else(|| Err("not measured".into()));
        section.target(
            &format!("holder RSS, dlock-{label}"),
            "MiB",
            v.clone().map(|(m, _)| m),
            Goal::Below(10.0),
        );
        section.target(
            &format!("holder CPU 1–3 s, dlock-{label}"),
            "ms",
            v.map(|(_, c)| c),
            Goal::AtMost(tick_ms),
        );
    }
}
