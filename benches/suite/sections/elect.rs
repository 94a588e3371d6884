//! Section 9, election takeover (`dlock elect`): how long a standby waits before its CMD
//! starts, on each store, after the leader's CMD exits (a hand-off) and after the leader's
//! dlock is SIGKILLed (its lease left to expire); beside `etcdctl elect`'s takeover on the
//! same etcd (the standby proclaimed, from the leader's resign on SIGINT).
//!
//! Times are wall-clock stamps: the leader's CMD stamps its end (`date +%s%N`) and the
//! standby's CMD its start, so the polling of the stamp files adds nothing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::Stats;
use crate::procs::{die_with_parent, interrupted, Guard};
use crate::report::{ms, Section, Table};
use crate::servers::etcdctl;
use crate::{Ctx, Store};

/// The leader's TTL when it is SIGKILLed: the shortest every store takes (etcd counts whole
/// seconds and has a floor of its own; ZooKeeper's session timeout is at least two ticks).
const KILL_TTL: &str = "3s";

/// How long one round may take before it counts as failed.
const ROUND_LIMIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
enum Takeover {
    /// The leader's CMD exits 0.
    Clean,
    /// The leader's dlock gets SIGKILL (its CMD dies with it: parent-death signal).
    Kill,
}

impl Takeover {
    fn label(self) -> &'static str {
        match self {
            Takeover::Clean => "clean exit",
            Takeover::Kill => "SIGKILL",
        }
    }
}

pub fn measure(ctx: &mut Ctx) -> Section {
    eprintln!("== election takeover");
    let clean = ctx.o.runs.min(20);
    let killed = ctx.o.runs.min(5);
    let stores = [
        Ok(ctx.local("elect")),
        ctx.redis(),
        ctx.redis_cluster(),
        ctx.redlock(),
        ctx.etcd_store(),
        ctx.memcached(),
        ctx.memcached_quorum(),
        ctx.zookeeper(),
        ctx.postgres().map(|(s, _)| s),
        ctx.mysql().map(|(s, _)| s),
    ];
    let names = [
        "local",
        "redis",
        "redis-cluster",
        "redlock",
        "etcd",
        "memcached",
        "memcached quorum",
        "zookeeper",
        "postgres",
        "mysql",
    ];
    let mut table = Table::new(&["backend", "takeover", "rounds", "p50 ms", "max ms"]).text_cols(2);
    let mut out = Vec::new();
    for (store, name) in stores.iter().zip(names) {
        let label = store.as_ref().map_or(name, Store::label);
        for (kind, n) in [(Takeover::Clean, clean), (Takeover::Kill, killed)] {
            if interrupted() {
                break;
            }
            let r = store.clone().and_then(|s| rounds(ctx, &s, kind, n));
            row(&mut table, &mut out, label, kind.label(), r);
        }
    }
    if !interrupted() {
        let r = ctx.etcd().and_then(|ep| etcdctl_rounds(&ep, clean));
        row(&mut table, &mut out, "etcdctl elect", "resign (SIGINT)", r);
    }
    let mut section = Section::default();
    section.table(
        format!(
            "9. election takeover: the leader's CMD ends (clean exit) or its dlock is \
             SIGKILLed (--ttl {KILL_TTL}) → the standby's CMD starts; etcdctl elect: the \
             leader gets SIGINT → the standby proclaims"
        ),
        table,
    );
    section.json = Some(json!({"kill_ttl": KILL_TTL, "runs": out}));
    section
}

/// One row of the table and of the JSON.
fn row(
    table: &mut Table,
    out: &mut Vec<serde_json::Value>,
    label: &str,
    kind: &str,
    r: Result<Vec<Duration>, String>,
) {
    match r.and_then(|s| Stats::of(&s).ok_or_else(|| "no samples".into())) {
        Ok(s) => {
            let cells = [
                label.into(),
                kind.into(),
                s.n.to_string(),
                ms(s.p50),
                ms(s.max),
            ];
            table.row(cells.to_vec());
            out.push(json!({"backend": label, "takeover": kind, "stats": s.json()}));
        }
        Err(e) => {
            table.failed_cells(vec![label.into(), kind.into()], &e);
            out.push(json!({"backend": label, "takeover": kind, "error": e}));
        }
    }
}

/// `n` takeovers of `kind` on `store`, each on an election of its own.
fn rounds(ctx: &Ctx, store: &Store, kind: Takeover, n: usize) -> Result<Vec<Duration>, String> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        if interrupted() {
            break;
        }
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let name = format!("bench-elect-{}-{i}", kind.label().replace(' ', "-"));
        samples.push(one(ctx, store, &name, kind, dir.path())?);
    }
    Ok(samples)
}

/// One takeover: the leader leads, the standby campaigns behind it, the leader goes.
fn one(
    ctx: &Ctx,
    store: &Store,
    name: &str,
    kind: Takeover,
    dir: &Path,
) -> Result<Duration, String> {
    let d = dir.display();
    let elect = |extra: &[&str], script: String| -> Result<Child, String> {
        let mut c = ctx.dlock(store);
        c.args(["-q", "elect", name])
            .args(extra)
            .args(["--", "sh", "-c"])
            .arg(script);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_parent(&mut c)
            .spawn()
            .map_err(|e| format!("cannot start dlock: {e}"))
    };
    let (extra, script): (&[&str], String) = match kind {
        Takeover::Clean => (
            &[],
            format!(
                "echo > '{d}/leads'; while [ ! -e '{d}/go' ]; do sleep 0.005; done; \
                 date +%s%N > '{d}/end'"
            ),
        ),
        Takeover::Kill => (
            &["--ttl", KILL_TTL],
            format!("echo > '{d}/leads'; exec sleep 60"),
        ),
    };
    let mut guard = Guard(vec![elect(extra, script)?]);
    stamp(&dir.join("leads"))?;
    guard
        .0
        .push(elect(&[], format!("date +%s%N > '{d}/start'"))?);
    campaigning(ctx, store, name);
    let end = match kind {
        Takeover::Clean => {
            std::fs::write(dir.join("go"), "").map_err(|e| format!("go: {e}"))?;
            stamp(&dir.join("end"))?
        }
        Takeover::Kill => {
            let at = now_ns();
            let _ = guard.0[0].kill();
            at
        }
    };
    let start = stamp(&dir.join("start"))?;
    for c in &mut guard.0 {
        let _ = c.wait();
    }
    Ok(Duration::from_nanos(start.saturating_sub(end) as u64))
}

/// Waits until `status` lists a waiter for `name`; a store that cannot tell (no
/// `waiters`) is given half a second.
fn campaigning(ctx: &Ctx, store: &Store, name: &str) {
    let limit = Instant::now() + Duration::from_secs(5);
    while Instant::now() < limit {
        let out = ctx.dlock(store).args(["--json", "status", name]).output();
        let st: serde_json::Value = out
            .ok()
            .and_then(|o| serde_json::from_slice(&o.stdout).ok())
            .unwrap_or_default();
        match st["waiters"].as_array() {
            Some(w) if !w.is_empty() => return,
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
            None => return std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The nanoseconds a CMD wrote to `path`, once it has.
fn stamp(path: &Path) -> Result<u128, String> {
    let limit = Instant::now() + ROUND_LIMIT;
    while Instant::now() < limit && !interrupted() {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text.strip_suffix('\n') {
            return Ok(line.trim().parse().unwrap_or(0));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(format!(
        "{} not written within {ROUND_LIMIT:?}",
        path.display()
    ))
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// `n` takeovers between two `etcdctl elect`: from the SIGINT that makes the leader resign
/// to the standby's proclamation on its stdout.
fn etcdctl_rounds(endpoint: &str, n: usize) -> Result<Vec<Duration>, String> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        if interrupted() {
            break;
        }
        let name = format!("bench-etcdctl-elect-{i}");
        let mut leader = ctl_elect(endpoint, &name, "first")?;
        let mut first = lines(&mut leader);
        first
            .next()
            .ok_or("etcdctl elect: the leader never proclaimed")?;
        let mut standby = ctl_elect(endpoint, &name, "second")?;
        let mut second = lines(&mut standby);
        let guard = Guard(vec![leader, standby]);
        wait_keys(endpoint, &name, 2)?;
        let at = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(guard.0[0].id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .map_err(|e| format!("kill: {e}"))?;
        second
            .next()
            .ok_or("etcdctl elect: the standby never proclaimed")?;
        samples.push(at.elapsed());
        drop(guard);
    }
    Ok(samples)
}

fn ctl_elect(endpoint: &str, name: &str, proposal: &str) -> Result<Child, String> {
    let mut c = etcdctl(endpoint);
    c.args(["elect", name, proposal]);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    die_with_parent(&mut c)
        .spawn()
        .map_err(|e| format!("cannot start etcdctl: {e}"))
}

/// The lines `c` prints, read as they come (a proclamation is the key, then the value).
fn lines(c: &mut Child) -> impl Iterator<Item = String> {
    let out = c.stdout.take().expect("piped stdout");
    BufReader::new(out).lines().map_while(Result::ok).step_by(2)
}

/// Waits until election `name` has `n` candidates.
fn wait_keys(endpoint: &str, name: &str, n: usize) -> Result<(), String> {
    let limit = Instant::now() + ROUND_LIMIT;
    while Instant::now() < limit {
        let out = etcdctl(endpoint)
            .args(["get", &format!("{name}/"), "--prefix", "--keys-only"])
            .output()
            .map_err(|e| format!("etcdctl get: {e}"))?;
        let keys = String::from_utf8_lossy(&out.stdout);
        if keys.lines().filter(|l| !l.is_empty()).count() >= n {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "etcdctl elect: {n} candidates not seen within {ROUND_LIMIT:?}"
    ))
}
