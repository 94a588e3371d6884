//! Section 7, `dlock wait` wake-up (CLI): from a release to the moment a `dlock wait`
//! process that was already waiting for the key exits, on every store.
//!
//! A sample starts once `dlock -v wait` has said it is waiting (so its start-up and first
//! look are outside it) and ends when the process has exited: the figure a script that
//! runs `dlock wait KEY && next-step` sees. Stores that notify wake it at once; those
//! that cannot (Memcached) look again every 200 ms.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock::backend::{Backend, ReleaseMode, WaitOptions};
use serde_json::json;

use super::{bench_holder, open, request, Stats};
use crate::procs::{interrupted, status_error};
use crate::report::{ms, Section, Table};
use crate::{Ctx, Store};

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== dlock wait wake-up");
    let n = (ctx.o.iters / 10).clamp(5, 30);
    let stores = [
        ("local", Ok(ctx.local("wait"))),
        ("redis", ctx.redis()),
        ("memcached", ctx.memcached()),
        ("etcd", ctx.etcd_store()),
        ("zookeeper", ctx.zookeeper()),
        ("postgres", ctx.postgres().map(|(s, _)| s)),
        ("mysql", ctx.mysql().map(|(s, _)| s)),
    ];
    let mut table = Table::new(&["backend", "wake-ups", "p50 ms", "p99 ms", "max ms"]);
    let mut out = Vec::new();
    for (label, store) in stores {
        if interrupted() {
            break;
        }
        let r = store.and_then(|s| samples(ctx, &s, n));
        match r.and_then(|s| Stats::of(&s).ok_or_else(|| "no samples".into())) {
            Ok(s) => {
                table.row(vec![
                    label.into(),
                    s.n.to_string(),
                    ms(s.p50),
                    ms(s.p99),
                    ms(s.max),
                ]);
                out.push(json!({"backend": label, "stats": s.json()}));
            }
            Err(e) => {
                table.failed_cells(vec![label.into()], &e);
                out.push(json!({"backend": label, "error": e}));
            }
        }
    }
    let mut section = Section::default();
    section.table(
        "7. dlock wait wake-up (CLI): release → a waiting `dlock wait KEY` has exited".to_string(),
        table,
    );
    section.json = Some(json!({"runs": out}));
    section
}

/// `n` wake-ups on `store`: the library holds the key, `dlock -v wait` waits for it, the
/// library releases it.
fn samples(ctx: &Ctx, store: &Store, n: usize) -> Result<Vec<Duration>, String> {
    let b = ctx.rt.block_on(open(store))?;
    let key = "bench-wait";
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        if interrupted() {
            break;
        }
        out.push(one(ctx, &*b, store, key)?);
    }
    Ok(out)
}

fn one(ctx: &Ctx, b: &dyn Backend, store: &Store, key: &str) -> Result<Duration, String> {
    let req = request(&bench_holder(), key, Duration::from_secs(30), false);
    let acq = ctx
        .rt
        .block_on(b.acquire(&req, &WaitOptions::until(None)))
        .map_err(|e| format!("acquire: {e}"))?;
    let mut child = crate::procs::Guard(vec![ctx
        .dlock(store)
        .args(["-v", "wait", "--timeout", "60s", key])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("dlock wait: {e}"))?]);
    let stderr = child.0[0].stderr.take().expect("piped");
    let mut lines = BufReader::new(stderr).lines();
    let waiting = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("waiting for"));
    if !waiting {
        return Err("dlock wait ended without saying it was waiting".into());
    }
    let t0 = Instant::now();
    ctx.rt
        .block_on(b.release(key, &acq.lease.owner, ReleaseMode::All))
        .map_err(|e| format!("release: {e}"))?;
    let status = child.0[0].wait().map_err(|e| format!("wait: {e}"))?;
    let took = t0.elapsed();
    drop(lines); // the rest of its story, unread
    if !status.success() {
        return Err(status_error(status));
    }
    Ok(took)
}
