//! Section 8, application locks: `dlock exec` on Redis `?layout=plain` beside dlock's own
//! layout and beside what a job that locks by hand runs (`redis-cli SET K tok NX PX` then a
//! compare-and-delete `EVAL`); Redlock `?layout=plain` on three servers beside node's
//! `redlock` taking and dropping the same lock; and the hand-off from an application's
//! release (Redis compare-and-delete, `pg_advisory_unlock`, `RELEASE_LOCK`) to a waiting
//! dlock's `acquire` returning (Redis polls; PostgreSQL and MariaDB queue in the server).

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use super::app_sides::{handoffs, APP_HOLD, REDIS_RELEASE};
use super::{exec, MakeCmd, Peer, Stats};
use crate::report::{ms, ratio, Section, Table};
use crate::{dlock_cmd, Ctx, Store};

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== application locks (redis layout=plain, redlock layout=plain, sql)");
    let runs = ctx.o.runs;
    let mut section = Section::default();
    let (redis, port) = (ctx.redis(), ctx.redis_port());
    let plain = redis.clone().map(|s| with_option(s, "layout=plain"));
    let (mut peers, name) = peers(ctx, &plain, redis, port, runs);
    peers.extend(redlock_peers(ctx, runs));
    exec::run_all(&mut peers, runs);
    let (table, out) = exec::table_against(&peers, name);
    section.table(
        "8a. exec overhead, application locks: wall time per run, after warm-up (vs peer: redis-cli)",
        table,
    );
    let (table, handoff) = handoff_table(ctx, &plain);
    section.table(
        format!(
            "8b. hand-off, application → dlock: the application holds the key {APP_HOLD:?} \
             while dlock waits, then releases (on a session of its client library); until \
             dlock's acquire returns"
        ),
        table,
    );
    let p50 = |n: &str| {
        peers
            .iter()
            .find(|p| p.name == n)
            .and_then(|p| p.stats().ok())
    };
    let r = |a: &str, b: &str| match (p50(a), p50(b)) {
        (Some(a), Some(b)) => Some(a.p50 / b.p50),
        _ => None,
    };
    section.line(format!(
        "layout=plain / dlock's layout (medians): {}",
        ratio(r("dlock exec (redis, layout=plain)", "dlock exec (redis)"))
    ));
    section.line(format!(
        "redlock layout=plain / node redlock (medians): {}",
        ratio(r(REDLOCK_PLAIN, NODE_REDLOCK))
    ));
    section.json = Some(json!({"runs": runs, "peers": out, "handoff": handoff}));
    section
}

/// `store` with `option` (`layout=plain`, `lock=advisory`) on its URL (each URL of a
/// quorum).
fn with_option(store: Store, option: &str) -> Store {
    let add = |url: String| format!("{url}?{option}");
    match store {
        Store::Redis(url) => Store::Redis(add(url)),
        Store::Postgres(url) => Store::Postgres(add(url)),
        Store::Mysql(url) => Store::Mysql(add(url)),
        Store::Quorum(label, urls) => Store::Quorum(label, urls.into_iter().map(add).collect()),
        other => other,
    }
}

/// The hand-off rows: Redis `?layout=plain`, PostgreSQL `?lock=advisory`, MariaDB
/// `?lock=get_lock`, each from its application's release; and their JSON.
fn handoff_table(ctx: &mut Ctx, plain: &Result<Store, String>) -> (Table, serde_json::Value) {
    let iters = ctx.o.iters.min(25);
    let postgres = ctx.postgres().map(|(s, _)| s);
    let mysql = ctx.mysql().map(|(s, _)| s);
    let mut table = Table::new(&["from", "to", "hand-offs", "p50 ms", "p99 ms", "max ms"]);
    let mut out = Vec::new();
    for (from, to, store, option, key) in [
        (
            "redis EVAL compare-and-delete",
            "dlock (layout=plain)",
            plain.clone(),
            None,
            "bench-handoff",
        ),
        (
            "psql-style pg_advisory_unlock",
            "dlock (lock=advisory)",
            postgres,
            Some("lock=advisory"),
            "424242",
        ),
        (
            "mariadb-style RELEASE_LOCK",
            "dlock (lock=get_lock)",
            mysql,
            Some("lock=get_lock"),
            "bench-handoff",
        ),
    ] {
        let samples = store.and_then(|app| {
            let dlock = option.map_or(app.clone(), |o| with_option(app.clone(), o));
            handoffs(&ctx.rt, iters, (&dlock, &app), key)
        });
        let stats = samples.and_then(|s| Stats::of(&s).ok_or_else(|| "no samples".into()));
        let lead = vec![from.to_string(), to.to_string()];
        match &stats {
            Ok(s) => {
                table.row([lead, vec![s.n.to_string(), ms(s.p50), ms(s.p99), ms(s.max)]].concat())
            }
            Err(e) => table.failed_cells(lead, e),
        }
        let stats = stats
            .map(|s| s.json())
            .unwrap_or_else(|e| json!({"error": e}));
        out.push(json!({"from": from, "to": to, "stats": stats}));
    }
    (table, json!(out))
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
        peers.push(dlock_peer(ctx, name, store, runs));
    }
    let name = "redis-cli SET NX PX + EVAL delete";
    let shown =
        "sh -c 'redis-cli SET bench-cli tok NX PX 30000 && redis-cli EVAL … 1 bench-cli tok'";
    peers.push(match port {
        Ok(port) => {
            let script = format!(
                "redis-cli -p {port} SET bench-cli tok NX PX 30000 >/dev/null && \
                 redis-cli -p {port} EVAL \"{REDIS_RELEASE}\" 1 bench-cli tok >/dev/null"
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

/// `dlock exec bench-app -- true` on `store`.
fn dlock_peer(ctx: &Ctx, name: &str, store: Result<Store, String>, runs: usize) -> Peer {
    let shown = "dlock exec bench-app -- true";
    match store {
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
    }
}

const REDLOCK_PLAIN: &str = "dlock exec (redlock, 3 servers, layout=plain)";
const NODE_REDLOCK: &str = "node redlock 4 lock + unlock (3 servers)";

/// One lock and unlock with node redlock 4 on ioredis, on the servers given as arguments.
const NODE_ONCE: &str = r#"
const Redis = require('ioredis');
const Redlock = require('redlock');
const clients = process.argv.slice(1).map((url) => new Redis(url));
new Redlock(clients, { retryCount: 0 }).lock('bench-app', 30000)
  .then((lock) => lock.unlock())
  .then(() => process.exit(0), () => process.exit(75));
"#;

/// Redlock `?layout=plain` on three servers, and node redlock taking the same lock.
fn redlock_peers(ctx: &mut Ctx, runs: usize) -> Vec<Peer> {
    let redlock = ctx.redlock();
    let plain = redlock.clone().map(|s| with_option(s, "layout=plain"));
    let mut peers = vec![dlock_peer(ctx, REDLOCK_PLAIN, plain, runs)];
    let shown = "node -e \"new Redlock([a, b, c]).lock(K, 30000).then(l => l.unlock())\"";
    let node = redlock.and_then(|store| Ok((store, node_modules()?)));
    peers.push(match node {
        Ok((Store::Quorum(_, urls), modules)) => {
            let make: MakeCmd = Box::new(move || {
                let mut c = Command::new("node");
                c.args(["-e", NODE_ONCE]).args(&urls);
                c.env("NODE_PATH", &modules);
                c
            });
            Peer::new(NODE_REDLOCK, shown, make, runs)
        }
        Ok(_) => Peer::failed(NODE_REDLOCK, shown, "not a quorum".into()),
        Err(e) => Peer::failed(NODE_REDLOCK, shown, e),
    });
    peers
}

/// node redlock 4 and ioredis 4, installed by npm into the target's own directory once
/// (where the interop tests install them too).
fn node_modules() -> Result<PathBuf, String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("node-redlock");
    let modules = dir.join("node_modules");
    if !modules.join("redlock/package.json").exists() {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&dir)
            .args(["redlock@4", "ioredis@4"])
            .output()
            .map_err(|e| format!("npm: {e} (.ci/install: apt-get install nodejs npm)"))?;
        if !out.status.success() {
            return Err(format!(
                "npm install redlock failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(modules)
}
