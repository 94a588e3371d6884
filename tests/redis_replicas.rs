//! `?min_replicas=N` on Redis: a master and one replica on loopback. A grant counts only once
//! the replica acknowledged it (`WAIT`), so the command finds its lease on the replica; with
//! the replica paused or dead, or fewer replicas than asked, acquire fails with exit 69 in
//! one line once its `--timeout` ends (replicas may come back meanwhile) and leaves the key
//! free; a renewal the replica does not acknowledge counts as
//! failed, so the command is killed (exit 79) before the lease could expire. On a Cluster
//! the master of the lock's slot waits for its replica. Bad values, and the parameter where
//! it is not supported (Redlock), are exit 2 before anything is touched.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::{self, alive, wait_exit, wait_for, RedisServer};

/// A master and one replica in sync with it.
struct Pair {
    master: RedisServer,
    replica: RedisServer,
}

impl Pair {
    fn start() -> Pair {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let pair = Pair { master, replica };
        pair.await_sync();
        pair
    }

    /// Waits until the replica's link is up and it acknowledges the master's writes.
    fn await_sync(&self) {
        let up = wait_for(Duration::from_secs(20), || {
            self.replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        assert!(up, "the replica never synced");
        assert_eq!(self.master.cli(&["WAIT", "1", "5000"]), "1", "replica acks");
    }

    /// A `dlock` command on the master with `query` (e.g. `min_replicas=1`).
    fn dlock(&self, query: &str) -> std::process::Command {
        let mut c = support::dlock();
        c.env("DLOCK_URL", format!("{}?{query}", self.master.url()));
        c
    }

    /// True when the master holds no lease on `key` (nothing given back is left behind).
    fn free_on_master(&self, key: &str) -> bool {
        self.master
            .cli(&["EXISTS", &format!("dlock:{{{key}}}:lease")])
            == "0"
    }
}

fn stderr(out: &Output) -> String {
    support::text(&out.stderr)
}

/// `dlock exec KEY --timeout 2s -- touch RAN`: fails as `min_replicas` says (once the
/// timeout ends: replicas may attach or catch up meanwhile), in one line naming the key,
/// the server and how many replicas acknowledged; the command never ran and the key is
/// free afterwards (`status` and the master agree).
fn refused(pair: &Pair, query: &str, key: &str, acked: &str) {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let out = pair
        .dlock(query)
        .args(["exec", key, "--timeout", "2s", "--", "touch"])
        .arg(&ran)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{query}: {err}");
    assert!(!ran.exists(), "{query}: the command must not run");
    let last = err.lines().last().unwrap_or_default();
    for part in [
        format!("cannot acquire lock '{key}'"),
        format!("127.0.0.1:{}", pair.master.port),
        format!("{acked} replica(s) acknowledged the lease"),
        "given back".to_string(),
    ] {
        assert!(last.contains(&part), "{query}: no '{part}' in: {err}");
    }
    assert!(
        pair.free_on_master(key),
        "{query}: the grant must be given back"
    );
    let status = pair.dlock(query).args(["status", key]).output().unwrap();
    let listed = support::text(&status.stdout);
    assert_eq!(status.status.code(), Some(1), "free: {}", stderr(&status));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(key) && l.contains("(free)")),
        "{listed}"
    );
}

/// `dlock exec KEY` with `dlock`'s URL, whose command prints its owner id and the owner
/// the replica at `replica_port` has for KEY: the two must be the same.
fn lease_on_replica(mut dlock: std::process::Command, key: &str, replica_port: u16) {
    // READONLY lets a Cluster replica answer for its master's slots (a plain replica
    // refuses it and answers all the same).
    let script = format!(
        "echo \"$DLOCK_OWNER\"; printf 'READONLY\\nHGET dlock:{{{key}}}:lease owner\\n' \
         | redis-cli -p {replica_port} | tail -n 1"
    );
    let out = dlock
        .args(["exec", key, "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = support::text(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(!lines[0].is_empty(), "{text}");
    assert_eq!(
        lines[0], lines[1],
        "the replica must hold the lease: {text}"
    );
}

#[test]
fn a_grant_is_on_the_replica_before_the_command_runs() {
    let pair = Pair::start();
    lease_on_replica(pair.dlock("min_replicas=1"), "acked", pair.replica.port);
    // A waiter granted when it is woken (the attempt behind its BLPOP) waits as well.
    let dir = tempfile::tempdir().unwrap();
    let (holder, _) = support::hold_with(pair.dlock(""), "acked", &[], "sleep 0.3", dir.path());
    let holder = support::Reaped(holder);
    lease_on_replica(pair.dlock("min_replicas=1"), "acked", pair.replica.port);
    drop(holder);
    // Renewals are acknowledged too: a hold of several renewal periods ends well.
    let out = pair
        .dlock("min_replicas=1")
        .args(["exec", "--ttl", "600ms", "acked", "--", "sleep", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_grant_no_replica_acknowledges_is_given_back() {
    let mut pair = Pair::start();
    // More replicas than there are.
    refused(&pair, "min_replicas=2", "two", "1 of 2");
    // The replica frozen: it holds its connection but acknowledges nothing.
    pair.replica.pause();
    refused(
        &pair,
        "min_replicas=1&min_replicas_timeout=200",
        "paused",
        "0 of 1",
    );
    pair.replica.resume();
    pair.await_sync();
    // The replica dead.
    pair.replica.kill();
    refused(&pair, "min_replicas=1", "dead", "0 of 1");
    // Off (0), the same lock is granted without replicas.
    let out = pair
        .dlock("min_replicas=0")
        .args(["exec", "dead", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn an_unacknowledged_renewal_kills_the_command_before_the_lease_expires() {
    let pair = Pair::start();
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_secs(3);
    let (dlock, pid) = support::hold_with(
        pair.dlock("min_replicas=1"),
        "renewed",
        &["--ttl", "3s"],
        "exec sleep 60",
        dir.path(),
    );
    let mut dlock = support::Reaped(dlock);
    // The lease as the replica has it, right after it received a renewal: what a promoted
    // replica would go by.
    let lease = "dlock:{renewed}:lease";
    let expires_ms = support::just_renewed(ttl * 2, || pair.replica.expiry_ms(lease));
    pair.replica.pause();
    let paused_at = Instant::now();
    let status = wait_exit(&mut dlock, Duration::from_secs(20)).expect("dlock must give up");
    let (dead_ms, took) = (support::now_ms(), paused_at.elapsed());
    pair.replica.resume();
    assert_eq!(status.code(), Some(79));
    assert!(!alive(pid), "the command must be dead");
    assert!(
        dead_ms < expires_ms,
        "the command must die before the lease can expire on the replica: {}ms late ({took:?} after the pause)",
        dead_ms - expires_ms
    );
    // It lived through at least one renewal period the replica did not acknowledge.
    assert!(took >= ttl / 4, "killed too soon: {took:?}");
    let mut err = String::new();
    use std::io::Read;
    dlock
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("lost the lease on 'renewed'"), "{err}");
}

#[test]
fn bad_or_unsupported_min_replicas_is_a_usage_error() {
    let pw = "s3cret";
    let urls = [
        format!("redis://:{pw}@127.0.0.1:1?min_replicas=-1"),
        format!("redis://:{pw}@127.0.0.1:1?min_replicas=two"),
        format!("redis://:{pw}@127.0.0.1:1?min_replicas=100000"),
        format!("redis://:{pw}@127.0.0.1:1?min_replicas=1&min_replicas_timeout=0"),
        format!("redis://:{pw}@127.0.0.1:1?min_replicas_timeout=100"),
        format!("redis+unix:///nowhere.sock?min_replicas=x&pass={pw}"),
        format!("redis+sentinel://:{pw}@127.0.0.1:1/m?min_replicas=1.5"),
        format!("redis+cluster://:{pw}@127.0.0.1:1,127.0.0.1:2?min_replicas=x"),
        format!("redis://:{pw}@127.0.0.1:1?min_replicas=1,redis://127.0.0.1:2,redis://127.0.0.1:3"),
    ];
    for url in urls {
        let out = support::dlock()
            .env("DLOCK_URL", &url)
            .args(["exec", "k", "--", "true"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{url}: {err}");
        assert!(err.contains("min_replicas"), "{url}: {err}");
        assert!(!err.contains(pw), "{url}: {err}");
    }
}

#[test]
fn behind_sentinel_the_master_it_names_waits_for_its_replica() {
    let pair = Pair::start();
    let sentinel = RedisServer::start_sentinel(pair.master.port, "mymaster");
    let url = |query: &str| {
        let mut c = support::dlock();
        let at = format!("redis+sentinel://127.0.0.1:{}/mymaster", sentinel.port);
        c.env("DLOCK_URL", format!("{at}?{query}"));
        c
    };
    lease_on_replica(url("min_replicas=1"), "sentinel", pair.replica.port);
    let out = url("min_replicas=2")
        .args(["exec", "sentinel", "--timeout", "2s", "--", "true"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("1 of 2 replica(s)"), "{err}");
    assert!(pair.free_on_master("sentinel"), "given back");
}

/// On a Cluster (each master with one replica), `WAIT` goes to the master of the lock's
/// slot: the lease is on that master's replica before the command runs, for keys on every
/// master; asking for two replicas is refused (exit 69, "1 of 2") and leaves nothing held;
/// with the replica of the key's own master frozen, "0 of 1".
#[test]
fn on_a_cluster_the_master_of_the_slot_waits_for_its_replica() {
    let c = support::RedisCluster::start();
    let url = |query: &str| {
        let mut d = support::dlock();
        d.env("DLOCK_URL", format!("{}?{query}", c.url()));
        d
    };
    let mut masters = std::collections::HashSet::new();
    for key in ["a", "b", "c", "d", "e", "f"] {
        let master = c.master_of(&format!("dlock:{{{key}}}:lease")).port;
        masters.insert(master);
        let replica = c.nodes[c.replica_of(master)].port;
        lease_on_replica(url("min_replicas=1"), key, replica);
    }
    assert!(masters.len() > 1, "the keys all live on one master");
    let out = url("min_replicas=2&min_replicas_timeout=200")
        .args(["exec", "two", "--timeout", "2s", "--", "true"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("1 of 2 replica(s) acknowledged"), "{err}");
    let status = url("").args(["status", "two"]).output().unwrap();
    assert_eq!(status.status.code(), Some(1), "given back: {status:?}");
    // With the replica of the key's master frozen, the others' replicas do not count.
    let master = c.master_of("dlock:{frozen}:lease").port;
    let replica = &c.nodes[c.replica_of(master)];
    replica.pause();
    let out = url("min_replicas=1&min_replicas_timeout=200")
        .args(["exec", "frozen", "--timeout", "2s", "--", "true"])
        .output()
        .unwrap();
    replica.resume();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("0 of 1 replica(s) acknowledged"), "{err}");
}
