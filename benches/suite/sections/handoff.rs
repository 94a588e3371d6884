//! Section 3, hand-off latency (library): from a release to the moment the next holder's
//! `acquire` returns, with the others already waiting.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock::backend::{Backend, ReleaseMode, WaitOptions};
use serde_json::json;
use tokio::task::JoinSet;

use super::{bench_holder, cycle, join_all, open, request, with_timeout, Stats};
use crate::procs::{interrupted, lock};
use crate::report::{ms, Goal, Section, Table};
use crate::{Ctx, Store};

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

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== hand-off latency");
    let iters = ctx.o.iters;
    let hold = Duration::from_millis(5);
    let stores = [
        Ok(ctx.local("handoff")),
        ctx.redis(),
        ctx.etcd_store(),
        ctx.postgres().map(|(store, _)| store),
        ctx.mysql().map(|(store, _)| store),
        ctx.zookeeper(),
    ];
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
    let mut etcd_p50 = Err("not measured".to_string());
    for (i, store) in stores.into_iter().enumerate() {
        let label = store.as_ref().map_or(
            ["local", "redis", "etcd", "postgres", "mysql", "zookeeper"][i],
            Store::label,
        );
        for waiters in [1usize, 4] {
            if interrupted() {
                break;
            }
            let r = one(ctx, &store, waiters, hold);
            let r = r.and_then(|s| Stats::of(&s).ok_or_else(|| "no samples".into()));
            let p50 = match r {
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
                    Ok(s.p50)
                }
                Err(e) => {
                    table.failed_cells(vec![label.into(), waiters.to_string()], &e);
                    out.push(json!({"backend": label, "waiters": waiters, "error": e}));
                    Err(e)
                }
            };
            match (label, waiters) {
                ("redis", 1) => redis_p50 = p50,
                ("etcd", 1) => etcd_p50 = p50,
                _ => {}
            }
        }
    }
    let mut section = Section::default();
    section.table(
        format!(
            "3. hand-off latency (library): release → next holder's acquire returns; \
             each holder keeps the lock {hold:?} so the others are waiting"
        ),
        table,
    );
    section.json = Some(json!({"hold_ms": hold.as_millis() as u64, "iters": iters, "runs": out}));
    section.target("hand-off p50, redis", "ms", redis_p50, Goal::Below(2.0));
    // Reported, with no goal of ours: a hand-off on etcd is a revoke and a write, each a
    // Raft commit with its fsync.
    section.line(format!(
        "hand-off p50, etcd (1 waiter): {}",
        etcd_p50.map_or_else(|e| format!("n/a ({e})"), ms)
    ));
    section
}

/// One row's samples: `waiters` + 1 holders taking turns on one key of `store`.
fn one(
    ctx: &Ctx,
    store: &Result<Store, String>,
    waiters: usize,
    hold: Duration,
) -> Result<Vec<Duration>, String> {
    let iters = ctx.o.iters;
    let limit = hold * iters as u32 * 3 + Duration::from_secs(20);
    match store {
        Ok(store) => ctx.rt.block_on(with_timeout(limit, async {
            let b = open(store).await?;
            let key = format!("bench-handoff-{waiters}");
            // One cycle first: a backend that does not work fails fast.
            cycle(b.as_ref(), &bench_holder(), &key).await?;
            handoff(b, &key, waiters, iters, hold).await
        })),
        Err(e) => Err(e.clone()),
    }
}
