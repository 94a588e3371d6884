//! Section 8, application locks on Redis (`?layout=plain`): `dlock exec` in that layout
//! beside dlock's own layout and beside what a job that locks by hand runs (`redis-cli SET
//! K tok NX PX` then a compare-and-delete `EVAL`); and the hand-off from an application's
//! release to a waiting dlock's `acquire` returning (it polls: applications do not notify).

use std::process::Command;
use std::time::{Duration, Instant};

use dlock::backend::{ReleaseMode, WaitOptions};
use serde_json::json;

use super::{bench_holder, exec, open, request, with_timeout, MakeCmd, Peer, Stats};
use crate::procs::interrupted;
use crate::report::{ms, ratio, Section, Table};
use crate::{dlock_cmd, Ctx, Store};

/// The compare-and-delete every canonical Redis lock releases with.
const RELEASE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0";

/// How long the application holds the key before each hand-off: long enough for a
/// waiting dlock's back-off to reach its longest pause.
const APP_HOLD: Duration = Duration::from_millis(400);

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== application locks (redis, layout=plain)");
    let runs = ctx.o.runs;
    let mut section = Section::default();
    let (redis, port) = (ctx.redis(), ctx.redis_port());
    let plain = redis.clone().map(|s| match s {
        Store::Redis(url) => Store::Redis(format!("{url}?layout=plain")),
        other => other,
    });
    let (mut peers, name) = peers(ctx, &plain, redis, port, runs);
    exec::run_all(&mut peers, runs);
    let (table, out) = exec::table_against(&peers, name);
    section.table(
        "8a. exec overhead, application locks: wall time per run, after warm-up",
        table,
    );
    let handoff = plain.and_then(|store| handoffs(ctx, &store));
    let mut table = Table::new(&["from", "to", "hand-offs", "p50 ms", "p99 ms", "max ms"]);
    let lead = vec!["application release".into(), "dlock acquire".into()];
    let stats = handoff.and_then(|s| Stats::of(&s).ok_or_else(|| "no samples".into()));
    match &stats {
        Ok(s) => table.row([lead, vec![s.n.to_string(), ms(s.p50), ms(s.p99), ms(s.max)]].concat()),
        Err(e) => table.failed_cells(lead, e),
    }
    section.table(
        format!(
            "8b. hand-off, application → dlock (layout=plain): the application holds the key \
             {APP_HOLD:?} while dlock waits, then releases; until dlock's acquire returns"
        ),
        table,
    );
    let p50 = |n: &str| {
        peers
            .iter()
            .find(|p| p.name == n)
            .and_then(|p| p.stats().ok())
    };
    let r = match (
        p50("dlock exec (redis, layout=plain)"),
        p50("dlock exec (redis)"),
    ) {
        (Some(a), Some(b)) => Some(a.p50 / b.p50),
        _ => None,
    };
    section.line(format!(
        "layout=plain / dlock's layout (medians): {}",
        ratio(r)
    ));
    section.json = Some(json!({
        "runs": runs, "peers": out,
        "handoff": stats.map(|s| s.json()).unwrap_or_else(|e| json!({"error": e})),
    }));
    section
}

/// `dlock exec` in both layouts, and the lock taken and released by hand with redis-cli
/// (whose name comes second).
fn peers(
    ctx: &Ctx,
    plain: &Result<Store, String>,
    redis: Result<Store, String>,
    port: Result<u16, String>,
    runs: usize,
) -> (Vec<Peer>, &'static str) {
    let mut peers = Vec::new();
    for (name, store) in [
        ("dlock exec (redis, layout=plain)", plain.clone()),
        ("dlock exec (redis)", redis),
    ] {
        let shown = "dlock exec bench-app -- true";
        peers.push(match store {
            Ok(store) => {
                let bin = ctx.dlock.clone();
                let make: MakeCmd = Box::new(move || {
                    let mut c = dlock_cmd(&bin, &store);
                    c.args(["exec", "bench-app", "--", "true"]);
                    c
                });
                Peer::new(name, shown, make, runs)
            }
            Err(e) => Peer::failed(name, shown, e),
        });
    }
    let name = "redis-cli SET NX PX + EVAL delete";
    let shown =
        "sh -c 'redis-cli SET bench-cli tok NX PX 30000 && redis-cli EVAL … 1 bench-cli tok'";
    peers.push(match port {
        Ok(port) => {
            let script = format!(
                "redis-cli -p {port} SET bench-cli tok NX PX 30000 >/dev/null && \
                 redis-cli -p {port} EVAL \"{RELEASE}\" 1 bench-cli tok >/dev/null"
            );
            let make: MakeCmd = Box::new(move || {
                let mut c = Command::new("sh");
                c.args(["-c", &script]);
                c
            });
            Peer::new(name, shown, make, runs)
        }
        Err(e) => Peer::failed(name, shown, e),
    });
    (peers, name)
}

/// Hand-offs from an application's compare-and-delete to a waiting dlock.
fn handoffs(ctx: &Ctx, store: &Store) -> Result<Vec<Duration>, String> {
    let iters = ctx.o.iters.min(25);
    let Store::Redis(url) = store else {
        return Err("not a Redis store".into());
    };
    let app_url = url.trim_end_matches("?layout=plain").to_string();
    let limit = (APP_HOLD + Duration::from_secs(1)) * iters as u32 + Duration::from_secs(20);
    ctx.rt.block_on(with_timeout(limit, async move {
        let b = open(store).await?;
        let client = redis::Client::open(app_url).map_err(|e| e.to_string())?;
        let mut app = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let mut samples = Vec::new();
        let holder = bench_holder();
        for _ in 0..iters {
            if interrupted() {
                break;
            }
            let mut set = redis::cmd("SET");
            set.arg("bench-handoff")
                .arg("app")
                .arg("NX")
                .arg("PX")
                .arg(30_000);
            let taken: Option<String> =
                set.query_async(&mut app).await.map_err(|e| e.to_string())?;
            taken.ok_or("bench-handoff was held")?;
            let (b2, holder) = (b.clone(), holder.clone());
            let waiter = tokio::spawn(async move {
                let req = request(&holder, "bench-handoff", Duration::from_secs(30), false);
                let acq = b2.acquire(&req, &WaitOptions::until(None)).await;
                (Instant::now(), acq)
            });
            tokio::time::sleep(APP_HOLD).await;
            let released = Instant::now();
            let mut del = redis::cmd("EVAL");
            del.arg(RELEASE).arg(1).arg("bench-handoff").arg("app");
            let _: i64 = del.query_async(&mut app).await.map_err(|e| e.to_string())?;
            let (at, acq) = waiter.await.map_err(|e| e.to_string())?;
            let acq = acq.map_err(|e| format!("acquire: {e}"))?;
            samples.push(at.duration_since(released));
            b.release("bench-handoff", &acq.lease.owner, ReleaseMode::All)
                .await
                .map_err(|e| format!("release: {e}"))?;
        }
        Ok(samples)
    }))
}
