//! `dlock exec` behind Sentinel through a real failover: one master, two replicas, three
//! Sentinels on loopback; the master killed while a lock is held and a waiter queues. dlock
//! looks the master up again when its connection breaks, so it reaches the promoted replica;
//! either the lease survived there (it was replicated: the test waits for that) or the
//! command is killed with exit 79; the waiter keeps trying through the failover and runs
//! after the holder; never do two commands run at once.

use std::time::Duration;

use crate::redis_cluster::{await_queued, contender, settle};
use crate::support::{self, send_signal, wait_for, Reaped, RedisServer};

const NAME: &str = "mymaster";

/// Waits until `sentinel` knows the two replicas and the two other Sentinels.
fn knows_everyone(sentinel: &RedisServer) -> bool {
    let info = sentinel.cli(&["SENTINEL", "MASTER", NAME]);
    let field = |name: &str| {
        let mut lines = info.lines();
        lines.find(|l| *l == name);
        lines.next().and_then(|v| v.parse::<u32>().ok())
    };
    field("num-slaves") == Some(2) && field("num-other-sentinels") == Some(2)
}

/// The master's port as `sentinel` names it.
fn master_port(sentinel: &RedisServer) -> Option<u16> {
    let reply = sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME]);
    reply.lines().nth(1).and_then(|p| p.parse().ok())
}

#[test]
fn a_master_killed_while_exec_runs_never_runs_two_holders() {
    let mut master = RedisServer::start();
    let port = master.port.to_string();
    let replicas: Vec<RedisServer> = (0..2)
        .map(|_| RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]))
        .collect();
    let config = format!(
        "sentinel monitor {NAME} 127.0.0.1 {port} 2\n\
         sentinel down-after-milliseconds {NAME} 1000\n\
         sentinel failover-timeout {NAME} 5000\n"
    );
    let sentinels: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_sentinel_with(&config))
        .collect();
    let in_sync = wait_for(Duration::from_secs(20), || {
        replicas.iter().all(|r| {
            r.cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        })
    });
    assert!(in_sync, "the replicas never synced");
    let discovered = wait_for(Duration::from_secs(30), || {
        sentinels.iter().all(knows_everyone)
    });
    assert!(
        discovered,
        "the Sentinels never found each other and the replicas"
    );
    let list: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("redis+sentinel://{}/{NAME}", list.join(","));
    let dlock = || {
        let mut c = support::dlock();
        c.env("DLOCK_URL", &url);
        c
    };

    let dir = tempfile::tempdir().unwrap();
    let (holder, pid) = support::hold_with(
        dlock(),
        "failover",
        &["--ttl", "10s"],
        "exec sleep 60",
        dir.path(),
    );
    let holder = Reaped(holder);
    let early = contender(&dlock, "failover", pid, dir.path(), "early");
    await_queued(&dlock, "failover");
    // The lease is on both replicas before the master goes.
    assert_eq!(master.cli(&["WAIT", "2", "5000"]), "2", "replicas in sync");
    send_signal(master.pid().unwrap(), "KILL");
    master.kill();
    let promoted = wait_for(Duration::from_secs(30), || {
        sentinels
            .iter()
            .all(|s| master_port(s).is_some_and(|p| p != master.port))
    });
    assert!(promoted, "Sentinel never promoted a replica");
    settle(&dlock, holder, pid, dir.path(), early);
}
