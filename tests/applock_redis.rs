//! `?layout=plain` (Redis's canonical `SET K token NX PX` lock on the application's own
//! key) against the real peers: redis-py's `Lock` (apt `python3-redis`, by `.ci/install`)
//! and node `redlock` 4 with `ioredis` (installed here by npm into the test target's own
//! directory, once). Either side holding K makes the other wait; eight mixed loops never
//! overlap; a paused server is the usual lease loss; on a Cluster, dlock's keys beside K
//! share K's slot. `applock_redlock.rs` does the same on three servers as Redlock.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::{self, alive, dlock, wait_exit, wait_for, RedisCluster, RedisServer};

/// Takes KEY with redis-py's `Lock` (blocking for up to 60 s when MODE is `wait`, once
/// otherwise: exit 75 when held) COUNT times, each time running `sh -c SCRIPT` under it.
const PY_PEER: &str = r#"
import subprocess, sys, redis
url, key, mode, script, count = sys.argv[1:6]
r = redis.Redis.from_url(url)
for _ in range(int(count)):
    lock = r.lock(key, timeout=30, sleep=0.01)
    if not lock.acquire(blocking=(mode == "wait"), blocking_timeout=60):
        sys.exit(75)
    try:
        code = subprocess.call(["sh", "-c", script])
    finally:
        lock.release()
    if code:
        sys.exit(code)
"#;

/// The same with node redlock 4 on ioredis: one server, or several (URLs joined by `,`)
/// as Redlock.
const NODE_PEER: &str = r#"
const Redis = require('ioredis');
const Redlock = require('redlock');
const { spawnSync } = require('child_process');
const [urls, key, mode, script, count] = process.argv.slice(2);
const clients = urls.split(',').map((url) => new Redis(url));
const redlock = new Redlock(clients, {
  retryCount: mode === 'wait' ? 6000 : 0, retryDelay: 10, retryJitter: 5,
});
(async () => {
  for (let i = 0; i < Number(count); i++) {
    let lock;
    try { lock = await redlock.lock(key, 30000); } catch (e) { process.exit(75); }
    const run = spawnSync('sh', ['-c', script], { stdio: 'inherit' });
    await lock.unlock();
    if (run.status !== 0) process.exit(run.status);
  }
  process.exit(0);
})();
"#;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Peer {
    Py,
    Node,
}

/// A Python with redis-py: `python3` on PATH, or the system's (apt's `python3-redis`).
fn python() -> &'static str {
    static FOUND: OnceLock<&'static str> = OnceLock::new();
    FOUND.get_or_init(|| {
        ["python3", "/usr/bin/python3"]
            .into_iter()
            .find(|py| {
                let probe = Command::new(py).args(["-c", "import redis"]).output();
                probe.is_ok_and(|o| o.status.success())
            })
            .expect("redis-py (.ci/install: apt-get install python3-redis)")
    })
}

/// node redlock 4 and ioredis 4, installed once into the test target's directory.
fn node_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("node-redlock");
        if !dir.join("node_modules/redlock/package.json").exists() {
            std::fs::create_dir_all(&dir).unwrap();
            let out = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
                .arg(&dir)
                .args(["redlock@4", "ioredis@4"])
                .output()
                .expect("npm (.ci/install: apt-get install nodejs npm)");
            assert!(out.status.success(), "npm install redlock: {out:?}");
        }
        std::fs::write(dir.join("peer.js"), NODE_PEER).unwrap();
        dir
    })
}

/// The peer's command: take KEY on the server at `url` (node: or the servers at `a,b,c`)
/// (`wait`: blocking), `count` times, running `script` under it each time.
pub(crate) fn peer(
    who: Peer,
    url: &str,
    key: &str,
    wait: bool,
    script: &str,
    count: u32,
) -> Command {
    let mut c = match who {
        Peer::Py => {
            let mut c = Command::new(python());
            c.args(["-c", PY_PEER]);
            c
        }
        Peer::Node => {
            let mut c = Command::new("node");
            c.arg(node_dir().join("peer.js"));
            c
        }
    };
    let mode = if wait { "wait" } else { "once" };
    c.args([url, key, mode, script, &count.to_string()]);
    c
}

/// The `dlock` command on the server at `url` with `?layout=plain`.
fn plain(url: &str) -> Command {
    plain_on(&[url.to_string()])
}

/// The `dlock` command on the servers at `urls` (several: Redlock), each with
/// `?layout=plain`.
pub(crate) fn plain_on(urls: &[String]) -> Command {
    let plain: Vec<String> = urls.iter().map(|u| format!("{u}?layout=plain")).collect();
    let mut c = dlock();
    c.env("DLOCK_URL", plain.join(","));
    c
}

/// A script that appends `WHO-start` to `log`, waits for the file `go-WHO`, and appends
/// `WHO-end`.
fn gated(dir: &Path, who: &str) -> String {
    let d = dir.display();
    format!(
        "echo {who}-start >> '{d}/log'; while [ ! -e '{d}/go-{who}' ]; do sleep 0.01; done; \
         echo {who}-end >> '{d}/log'"
    )
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
}

pub(crate) fn spawn(mut c: Command) -> Child {
    c.stdin(Stdio::null()).stdout(Stdio::piped());
    c.stderr(Stdio::piped()).spawn().unwrap()
}

pub(crate) fn status_json(urls: &[String], key: &str) -> serde_json::Value {
    let out = plain_on(urls)
        .args(["status", key, "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// `first` holds KEY (its command gated), `second` is refused at once and then waits,
/// and runs only after `first`'s command ended and released (on every server: several
/// are Redlock's).
pub(crate) fn second_waits_for_first(
    servers: &[RedisServer],
    first: Option<Peer>,
    second: Option<Peer>,
) {
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let url = urls.join(",");
    let dir = tempfile::tempdir().unwrap();
    let run = |who: Option<Peer>, name: &str, wait: bool| -> Command {
        let script = gated(dir.path(), name);
        match who {
            Some(p) => peer(p, &url, "app:lock", wait, &script, 1),
            None => {
                let mut c = plain_on(&urls);
                c.args(["exec", "app:lock"]);
                if !wait {
                    c.arg("-n");
                }
                c.args(["--", "sh", "-c", &script]);
                c
            }
        }
    };
    let mut a = spawn(run(first, "first", true));
    assert!(wait_for(Duration::from_secs(30), || log(dir.path())
        .contains("first-start")));
    let held = status_json(&urls, "app:lock");
    let token = held["fencing_token"].as_u64().unwrap();
    match first {
        Some(_) => {
            assert_eq!(
                (token, held["host"].as_str()),
                (0, Some("application")),
                "{held}"
            );
            // An application records no acquisition time: left out, not the whole epoch.
            assert!(held["held_for_ms"].is_null(), "{held}");
            assert!(held["acquired_at"].is_null(), "{held}");
        }
        None => {
            assert!(token >= 1, "{held}");
            assert!(held["held_for_ms"].is_u64(), "{held}");
        }
    }
    assert!(held["ttl_left_ms"].as_u64().unwrap() > 0, "{held}");
    let refused = run(second, "refused", false).output().unwrap();
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    let mut b = spawn(run(second, "second", true));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !log(dir.path()).contains("second-start"),
        "{}",
        log(dir.path())
    );
    std::fs::write(dir.path().join("go-first"), "").unwrap();
    std::fs::write(dir.path().join("go-second"), "").unwrap();
    for child in [&mut a, &mut b] {
        let status = wait_exit(child, Duration::from_secs(30)).expect("exits");
        assert!(status.success(), "{status:?}");
    }
    let lines: Vec<String> = log(dir.path()).lines().map(String::from).collect();
    assert_eq!(
        lines,
        ["first-start", "first-end", "second-start", "second-end"],
        "{lines:?}"
    );
    // Released: nothing of ours is left under the application's key.
    for server in servers {
        assert_eq!(server.cli(&["EXISTS", "app:lock"]), "0");
    }
}

#[test]
fn dlock_waits_for_redis_py() {
    second_waits_for_first(&[RedisServer::start()], Some(Peer::Py), None);
}

#[test]
fn redis_py_waits_for_dlock() {
    second_waits_for_first(&[RedisServer::start()], None, Some(Peer::Py));
}

#[test]
fn dlock_waits_for_node_redlock() {
    second_waits_for_first(&[RedisServer::start()], Some(Peer::Node), None);
}

#[test]
fn node_redlock_waits_for_dlock() {
    second_waits_for_first(&[RedisServer::start()], None, Some(Peer::Node));
}

#[test]
fn the_application_key_holds_the_token_alone() {
    let server = RedisServer::start();
    let out = plain(&server.url())
        .args(["lock", "jobs", "--ttl", "20s", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let owner = lease["owner"].as_str().unwrap();
    assert_eq!(server.cli(&["TYPE", "jobs"]), "string");
    assert_eq!(server.cli(&["GET", "jobs"]), owner);
    let pttl: u64 = server.cli(&["PTTL", "jobs"]).parse().unwrap();
    assert!(pttl > 15_000 && pttl <= 20_000, "{pttl}");
    let mut keys: Vec<String> = server
        .cli(&["KEYS", "*"])
        .lines()
        .map(String::from)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "dlock:plain:{jobs}:jobs:fence",
            "dlock:plain:{jobs}:jobs:meta",
            "jobs"
        ]
    );
    // `status` with no key lists dlock's holders of this layout.
    let listed = plain(&server.url())
        .args(["status", "--json"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        listed.contains("\"jobs\"") && listed.contains(owner),
        "{listed}"
    );
    let unlock = plain(&server.url())
        .args(["unlock", "jobs", "--owner", owner])
        .output();
    assert!(unlock.unwrap().status.success());
    assert_eq!(server.cli(&["EXISTS", "jobs"]), "0");
    // The counter stays, and goes on rising.
    assert_eq!(server.cli(&["GET", "dlock:plain:{jobs}:jobs:fence"]), "1");
    let again = support::token_of(plain(&server.url()).args(["exec", "jobs"]));
    assert_eq!(again, 2);
}

#[test]
fn what_the_layout_cannot_carry_is_refused_in_one_line() {
    let server = RedisServer::start();
    let url = server.url();
    for extra in [&["--shared"][..], &["--limit", "2"]] {
        let out = plain(&url)
            .args(["exec", "app:lock"])
            .args(extra)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("app:lock") && err.contains("layout=plain"),
            "{err}"
        );
    }
    assert_eq!(server.cli(&["DBSIZE"]), "0", "nothing written");
}

#[test]
fn eight_mixed_loops_never_overlap() {
    eight_mixed_loops(&[RedisServer::start().url()], [Peer::Py, Peer::Node]);
}

/// Eight loops on one key on the servers at `urls` (several: Redlock's), four of dlock
/// and two of each of `peers`: never two inside at once, and dlock's tokens rise.
pub(crate) fn eight_mixed_loops(urls: &[String], peers: [Peer; 2]) {
    let url = urls.join(",");
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let m = marks.display();
    let section = |token: &str| {
        format!("echo \"start $$ {token}\" >> '{m}'; sleep 0.05; echo \"end $$\" >> '{m}'")
    };
    let rounds = 4;
    let mut children = Vec::new();
    for i in 0..8 {
        let c = match i % 4 {
            0 | 1 => {
                let one = format!(
                    "'{}' exec loop -w 60s -- sh -c {}",
                    support::dlock_bin().display(),
                    support::loops::quoted(&section("$DLOCK_FENCING_TOKEN"))
                );
                let script = format!("for i in $(seq {rounds}); do {one} || exit 9; done");
                support::loops::shell(&plain_on(urls), &script)
            }
            2 => peer(peers[0], &url, "loop", true, &section("-"), rounds),
            _ => peer(peers[1], &url, "loop", true, &section("-"), rounds),
        };
        children.push(spawn(c));
    }
    for mut child in children {
        let status = wait_exit(&mut child, Duration::from_secs(120)).expect("a loop ends");
        assert!(
            status.success(),
            "{status:?}: {}",
            support::stderr_of(child)
        );
    }
    let log = std::fs::read_to_string(&marks).unwrap();
    let (mut inside, mut last_token) = (None, 0u64);
    for line in log.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["start", pid, token] => {
                assert!(inside.is_none(), "two holders at once:\n{log}");
                inside = Some(pid.to_string());
                if let Ok(token) = token.parse::<u64>() {
                    assert!(
                        token > last_token,
                        "token {token} after {last_token}:\n{log}"
                    );
                    last_token = token;
                }
            }
            ["end", pid] => assert_eq!(inside.take().as_deref(), Some(*pid), "{log}"),
            _ => panic!("bad mark {line:?}"),
        }
    }
    assert_eq!(log.lines().filter(|l| l.starts_with("end")).count(), 32);
}

#[test]
fn a_server_paused_past_the_ttl_is_a_lost_lease() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (mut held, pid) = support::hold_with(
        plain(&server.url()),
        "paused",
        &["--ttl", "900ms"],
        "exec sleep 60",
        dir.path(),
    );
    let expires_ms = support::just_renewed(Duration::from_secs(2), || server.expiry_ms("paused"));
    server.pause();
    // CMD's death is timed, not dlock's exit, which follows it.
    let dead = support::wait_for(Duration::from_secs(10), || !alive(pid));
    let dead_ms = support::now_ms();
    let status = wait_exit(&mut held, Duration::from_secs(10)).expect("dlock gives up");
    server.resume();
    assert!(dead, "the command must be dead");
    assert_eq!(status.code(), Some(79));
    assert!(dead_ms < expires_ms, "{}ms late", dead_ms - expires_ms);
    // Once expired, an application takes it.
    let took = peer(Peer::Py, &server.url(), "paused", true, "true", 1).output();
    assert!(took.unwrap().status.success());
}

/// On a Cluster, dlock's keys beside K share K's slot for every shape of K (tagged, or
/// with braces that make no tag), so each script touches one slot.
#[test]
fn side_keys_share_the_application_key_s_cluster_slot() {
    let cluster = RedisCluster::start();
    let url = cluster.url();
    for key in ["deploy", "user:{42}:lock", "a}b", "x{}y"] {
        let out = plain(&url)
            .args(["lock", key, "--ttl", "30s", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{key}: {out:?}");
        let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let node = cluster.master_of(key);
        assert_eq!(node.cli(&["GET", key]), lease["owner"].as_str().unwrap());
        let slot = node.cli(&["CLUSTER", "KEYSLOT", key]);
        let ours: Vec<String> = node
            .cli(&["KEYS", "dlock:plain:*"])
            .lines()
            .filter(|n| {
                n.ends_with(&format!(":{key}:meta")) || n.ends_with(&format!(":{key}:fence"))
            })
            .map(String::from)
            .collect();
        assert_eq!(ours.len(), 2, "{key}: {ours:?}");
        for name in &ours {
            assert_eq!(node.cli(&["CLUSTER", "KEYSLOT", name]), slot, "{name}");
        }
        let st = status_json(std::slice::from_ref(&url), key);
        assert_eq!(st["fencing_token"].as_u64(), Some(1), "{st}");
        let owner = lease["owner"].as_str().unwrap();
        let unlock = plain(&url).args(["unlock", key, "--owner", owner]).output();
        assert!(unlock.unwrap().status.success(), "{key}");
    }
}
