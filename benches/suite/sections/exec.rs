//! Section 1, exec overhead: the wall time of one `dlock exec KEY -- true` (local store,
//! Redis, Redis with `?min_replicas=1` (a master and its replica), a Redis Cluster,
//! memcached, Redlock and a memcached quorum of three servers each, ZooKeeper, etcd), next
//! to flock(1), `etcdctl lock` (on the same etcd), `redis-cli PING` and the spawn of `true`
//! alone.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use super::{current_of, spread, MakeCmd, Peer, Stats, BASELINE};
use crate::procs::interrupted;
use crate::report::{ms, ratio, Goal, Section, Table, Versus};
use crate::servers::etcdctl;
use crate::{dlock_cmd, Ctx, Store};

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== exec overhead");
    let runs = ctx.o.runs;
    let etcd_runs = (runs / 4).max(5);
    let mut peers = peers(ctx, runs, etcd_runs);
    run_all(&mut peers, runs);

    let median = |name: &str| -> Result<f64, String> {
        let p = peers.iter().find(|p| p.name == name).expect("peer");
        p.stats().map(|s| s.p50).map_err(|e| format!("{name}: {e}"))
    };
    let flock = median("flock FILE true");
    let mut section = Section::default();
    let (table, out) = table(&peers, &flock);
    section.table(
        "1. exec overhead: wall time per run (spawn → exit), after warm-up",
        table,
    );

    let div = |a: Result<f64, String>, b: &Result<f64, String>| -> Result<f64, String> {
        Ok(a? / b.clone()?)
    };
    let local_ratio = div(median("dlock exec (local)"), &flock);
    let redis_ratio = div(median("dlock exec (redis)"), &flock);
    let etcd_ratio = div(median("etcdctl lock"), &median("dlock exec (redis)"));
    let on_etcd = div(median("dlock exec (etcd)"), &median("etcdctl lock"));
    let metrics_local = div(
        median("dlock exec (local, --metrics-file)"),
        &median("dlock exec (local)"),
    );
    let metrics_redis = div(
        median("dlock exec (redis, --metrics-file)"),
        &median("dlock exec (redis)"),
    );
    section.line(format!(
        "--metrics-file costs (medians): local {}, redis {} of a plain exec",
        ratio(metrics_local.clone().ok()),
        ratio(metrics_redis.clone().ok()),
    ));
    section.line(format!(
        "ratios (medians): dlock-local/flock {}, dlock-redis/flock {}, etcdctl/dlock-redis {}, \
         dlock-etcd/etcdctl {}",
        ratio(local_ratio.clone().ok()),
        ratio(redis_ratio.clone().ok()),
        ratio(etcd_ratio.clone().ok()),
        ratio(on_etcd.clone().ok()),
    ));
    let r = |v: &Result<f64, String>| v.as_ref().ok().copied();
    section.json = Some(json!({
        "runs": runs, "etcd_runs": etcd_runs, "peers": out,
        "ratios": {
            "dlock_local_over_flock": r(&local_ratio),
            "dlock_redis_over_flock": r(&redis_ratio),
            "etcdctl_over_dlock_redis": r(&etcd_ratio),
            "dlock_etcd_over_etcdctl": r(&on_etcd),
            "metrics_file_local": r(&metrics_local),
            "metrics_file_redis": r(&metrics_redis),
        },
    }));
    let mut versus = Versus::new();
    for base in peers.iter().filter(|p| p.name.starts_with(BASELINE)) {
        let name = current_of(&base.name).unwrap_or_default();
        if let Some(cur) = peers.iter().find(|p| p.name == name) {
            versus.add(&name, "median ms", fifths(cur, base));
        }
    }
    versus.finish(&mut section, "1b. exec overhead");
    let x = "x";
    section.target(
        "exec: dlock-local / flock",
        x,
        local_ratio,
        Goal::AtMost(1.3),
    );
    section.target(
        "exec: dlock-redis / flock",
        x,
        redis_ratio,
        Goal::AtMost(1.5),
    );
    section.target(
        "exec: etcdctl / dlock-redis",
        x,
        etcd_ratio,
        Goal::AtLeast(5.0),
    );
    section.target(
        "exec on etcd: dlock / etcdctl lock",
        x,
        on_etcd,
        Goal::AtMost(0.3),
    );
    section
}

/// This binary's median over the baseline's in each fifth of the runs (the two took turns,
/// so each fifth of one saw the same machine as that of the other).
fn fifths(cur: &Peer, base: &Peer) -> Option<(f64, f64, f64)> {
    cur.stats().ok()?;
    base.stats().ok()?;
    let (a, b) = (&cur.samples, &base.samples);
    let n = a.len().min(b.len());
    let median = |s: &[Duration]| Stats::of(s).map(|s| s.p50);
    spread((0..5).map(|k| {
        let part = k * n / 5..(k + 1) * n / 5;
        Some((median(&a[part.clone()])?, median(&b[part])?))
    }))
}

/// A peer that runs `program ARGS…`; `shown` is its command line in the JSON.
fn plain(
    name: &str,
    shown: &str,
    program: impl Into<PathBuf>,
    args: &[&OsStr],
    runs: usize,
) -> Peer {
    let program = program.into();
    let args: Vec<OsString> = args.iter().map(|&a| a.to_owned()).collect();
    let make: MakeCmd = Box::new(move || {
        let mut c = Command::new(&program);
        c.args(&args);
        c
    });
    Peer::new(name, shown, make, runs)
}

/// Every command measured, in the table's order.
fn peers(ctx: &mut Ctx, runs: usize, etcd_runs: usize) -> Vec<Peer> {
    let local = ctx.local("exec");
    let redis = ctx.redis();
    let redis_port = ctx.redis_port();
    let etcd = ctx.etcd();
    let zookeeper = ctx.zookeeper();
    let etcd_store = ctx.etcd_store();
    let lockfile = ctx.file("exec.flock");

    let true_ = OsStr::new("true");
    let mut peers = vec![
        plain("true (spawn only)", "true", "true", &[], runs),
        plain(
            "dlock --version",
            "dlock --version",
            &ctx.dlock,
            &[OsStr::new("--version")],
            runs,
        ),
        plain(
            "flock FILE true",
            "flock FILE true",
            "flock",
            &[lockfile.as_os_str(), true_],
            runs,
        ),
    ];
    let metrics = ctx.file("exec.prom");
    let memcached = ctx.memcached();
    let redlock = ctx.redlock();
    let memcached_quorum = ctx.memcached_quorum();
    let cluster = ctx.redis_cluster();
    let replicated = ctx.redis_replicated();
    let (base_local, base_redis) = (local.clone(), redis.clone());
    for (label, store, with_metrics) in [
        ("local", Ok(local.clone()), false),
        ("redis", redis.clone(), false),
        ("redis, min_replicas=1", replicated, false),
        ("redis-cluster", cluster, false),
        ("memcached", memcached, false),
        ("redlock, 3 servers", redlock, false),
        ("memcached quorum, 3 servers", memcached_quorum, false),
        ("zookeeper", zookeeper, false),
        ("local", Ok(local), true),
        ("redis", redis, true),
    ] {
        let extra = if with_metrics { ", --metrics-file" } else { "" };
        let name_of = |label: &str| format!("dlock exec ({label}{extra})");
        let shown = if with_metrics {
            "dlock exec bench-exec --metrics-file FILE -- true"
        } else {
            "dlock exec bench-exec -- true"
        };
        match store {
            Ok(store) => {
                let (bin, file) = (ctx.dlock.clone(), metrics.clone());
                let name = name_of(label);
                let make: MakeCmd = Box::new(move || {
                    let mut c = dlock_cmd(&bin, &store);
                    c.args(["exec", "bench-exec"]);
                    if with_metrics {
                        c.arg("--metrics-file").arg(&file);
                    }
                    c.args(["--", "true"]);
                    c
                });
                peers.push(Peer::new(&name, shown, make, runs))
            }
            Err(e) => peers.push(Peer::failed(&name_of(label), shown, e)),
        }
    }
    if let Some(base) = ctx.o.baseline.clone() {
        let v = [OsStr::new("--version")];
        let name = format!("{BASELINE} --version");
        peers.push(plain(&name, "dlock --version", &base, &v, runs));
        for (label, store) in [("local", Ok(base_local)), ("redis", base_redis)] {
            let name = format!("{BASELINE} exec ({label})");
            peers.push(exec_peer(&name, &base, store, runs));
        }
    }
    peers.push(etcd_peer(etcd, etcd_runs));
    peers.push(dlock_etcd_peer(&ctx.dlock, etcd_store, etcd_runs));
    peers.extend(postgres_peers(ctx, runs));
    peers.extend(mysql_peers(ctx, runs));
    let shown = "redis-cli -p PORT PING";
    peers.push(match redis_port {
        Ok(port) => {
            let port = port.to_string();
            let args = [OsStr::new("-p"), OsStr::new(&port), OsStr::new("PING")];
            plain("redis-cli PING", shown, "redis-cli", &args, runs)
        }
        Err(e) => Peer::failed("redis-cli PING", shown, e),
    });
    peers
}

/// `dlock exec` on PostgreSQL, and psql taking and dropping an advisory lock (what a job
/// that locks by hand runs), against one server started for the suite.
fn postgres_peers(ctx: &mut Ctx, runs: usize) -> Vec<Peer> {
    let dlock_name = "dlock exec (postgres)";
    let psql_name = "psql advisory lock";
    let psql_shown = "psql -c 'SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1)'";
    let (store, port) = match ctx.postgres() {
        Ok(found) => found,
        Err(e) => {
            return vec![
                Peer::failed(dlock_name, "dlock exec bench-exec -- true", e.clone()),
                Peer::failed(psql_name, psql_shown, e),
            ]
        }
    };
    let make = exec_cmd(ctx, store.clone());
    let advisory = match &store {
        Store::Postgres(url) => Store::Postgres(format!("{url}?lock=advisory")),
        other => other.clone(),
    };
    let make_advisory = exec_cmd(ctx, advisory);
    let psql = crate::test_servers::pg_bin("psql");
    let make_psql: MakeCmd = Box::new(move || {
        let mut c = Command::new(&psql);
        c.args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", crate::test_servers::PG_USER, "-d", "postgres", "-Xq"])
            .args([
                "-c",
                "SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1)",
            ])
            .env("PGPASSWORD", crate::test_servers::PG_PASSWORD)
            .stdout(std::process::Stdio::null());
        c
    });
    vec![
        Peer::new(dlock_name, "dlock exec bench-exec -- true", make, runs),
        Peer::new(
            "dlock exec (postgres ?lock=advisory)",
            "dlock -u 'postgres://…?lock=advisory' exec bench-exec -- true",
            make_advisory,
            runs,
        ),
        Peer::new(psql_name, psql_shown, make_psql, runs),
    ]
}

/// `dlock exec` on MariaDB, and the `mariadb` client taking and dropping a named lock (what
/// a job that locks by hand runs), against one server started for the suite.
fn mysql_peers(ctx: &mut Ctx, runs: usize) -> Vec<Peer> {
    let dlock_name = "dlock exec (mysql)";
    let client_name = "mariadb GET_LOCK";
    let sql = "SELECT GET_LOCK('bench', 10); SELECT RELEASE_LOCK('bench')";
    let client_shown = format!("mariadb -e \"{sql}\"");
    let (store, port) = match ctx.mysql() {
        Ok(found) => found,
        Err(e) => {
            return vec![
                Peer::failed(dlock_name, "dlock exec bench-exec -- true", e.clone()),
                Peer::failed(client_name, &client_shown, e),
            ]
        }
    };
    let make = exec_cmd(ctx, store.clone());
    let get_lock = match &store {
        Store::Mysql(url) => Store::Mysql(format!("{url}?lock=get_lock")),
        other => other.clone(),
    };
    let make_get_lock = exec_cmd(ctx, get_lock);
    let make_client: MakeCmd = Box::new(move || {
        let mut c = Command::new("mariadb");
        c.arg("--no-defaults")
            .args(["-h", "127.0.0.1", "-P", &port.to_string()])
            .args(["-u", crate::test_servers::MY_USER, "-e", sql])
            .env("MYSQL_PWD", crate::test_servers::MY_PASSWORD)
            .stdout(std::process::Stdio::null());
        c
    });
    vec![
        Peer::new(dlock_name, "dlock exec bench-exec -- true", make, runs),
        Peer::new(
            "dlock exec (mysql ?lock=get_lock)",
            "dlock -u 'mysql://…?lock=get_lock' exec bench-exec -- true",
            make_get_lock,
            runs,
        ),
        Peer::new(client_name, &client_shown, make_client, runs),
    ]
}

/// `dlock exec bench-exec -- true` on `store`.
fn exec_cmd(ctx: &Ctx, store: Store) -> MakeCmd {
    let bin = ctx.dlock.clone();
    Box::new(move || {
        let mut c = dlock_cmd(&bin, &store);
        c.args(["exec", "bench-exec", "--", "true"]);
        c
    })
}

fn etcd_peer(etcd: Result<String, String>, etcd_runs: usize) -> Peer {
    let shown = "etcdctl lock bench-exec true";
    match etcd {
        Ok(ep) => {
            let make: MakeCmd = Box::new(move || {
                let mut c = etcdctl(&ep);
                c.args(["lock", "bench-exec", "true"]);
                c
            });
            let mut p = Peer::new("etcdctl lock", shown, make, etcd_runs);
            p.warm = 3;
            p
        }
        Err(e) => Peer::failed("etcdctl lock", shown, e),
    }
}

/// `dlock exec bench-exec -- true` run by `bin` on `store`.
fn exec_peer(name: &str, bin: &Path, store: Result<Store, String>, runs: usize) -> Peer {
    let shown = "dlock exec bench-exec -- true";
    match store {
        Ok(store) => {
            let bin = bin.to_path_buf();
            let make: MakeCmd = Box::new(move || {
                let mut c = dlock_cmd(&bin, &store);
                c.args(["exec", "bench-exec", "--", "true"]);
                c
            });
            Peer::new(name, shown, make, runs)
        }
        Err(e) => Peer::failed(name, shown, e),
    }
}

/// `dlock exec` on the etcd `etcdctl lock` uses, as often as etcdctl runs.
fn dlock_etcd_peer(bin: &Path, store: Result<Store, String>, etcd_runs: usize) -> Peer {
    let mut p = exec_peer("dlock exec (etcd)", bin, store, etcd_runs);
    p.warm = 3;
    p
}

/// A first checked run, the warm-up, then the measured runs.
pub fn run_all(peers: &mut [Peer], runs: usize) {
    for p in peers.iter_mut() {
        p.probe();
    }
    for p in peers.iter_mut() {
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
}

/// The table's rows and the JSON's list of peers, each against the median of `against`
/// (a peer's name).
pub fn table_against(peers: &[Peer], against: &str) -> (Table, Vec<serde_json::Value>) {
    let base = peers.iter().find(|p| p.name == against).expect("peer");
    let base = base.stats().map(|s| s.p50);
    table_with(peers, &base, "vs peer")
}

/// The table's rows and the JSON's list of peers.
fn table(peers: &[Peer], flock: &Result<f64, String>) -> (Table, Vec<serde_json::Value>) {
    table_with(peers, flock, "vs flock")
}

fn table_with(
    peers: &[Peer],
    flock: &Result<f64, String>,
    versus: &'static str,
) -> (Table, Vec<serde_json::Value>) {
    let mut table = Table::new(&["command", "runs", "median ms", "p95 ms", "min ms", versus]);
    let mut out = Vec::new();
    for p in peers {
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
    (table, out)
}
