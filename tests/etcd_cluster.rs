//! The etcd backend on a 3-member cluster: losing the leader loses no lock.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{dlock, read_when_ready, wait_exit, EtcdCluster, EtcdServer};

/// The index of the member that leads, as the members report it.
fn leader(cluster: &EtcdCluster) -> usize {
    let status = |m: &EtcdServer| -> serde_json::Value {
        let out = m.ctl(&["endpoint", "status", "-w", "json"]);
        serde_json::from_str(&out).unwrap()
    };
    let first = status(&cluster.members[0]);
    let leader = first[0]["Status"]["leader"].as_u64().unwrap();
    cluster
        .members
        .iter()
        .position(|m| status(m)[0]["Status"]["header"]["member_id"].as_u64() == Some(leader))
        .expect("a leader among the members")
}

#[test]
fn the_leader_killed_while_a_lock_is_held() {
    a_member_killed_while_a_lock_is_held(leader);
}

/// The first endpoint of the URL is the one dlock talks to: it must move to another.
#[test]
fn the_members_dlock_talks_to_killed_while_a_lock_is_held() {
    a_member_killed_while_a_lock_is_held(|_| 0);
}

/// A holder keeps its lock when the member `victim` picks is SIGKILLed: no second holder,
/// and the lease lives on through keep-alives to the others.
fn a_member_killed_while_a_lock_is_held(victim: fn(&EtcdCluster) -> usize) {
    let mut cluster = EtcdCluster::start();
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let go = dir.path().join("go");
    let script = format!(
        "echo $DLOCK_FENCING_TOKEN > '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
        ready.display(),
        go.display()
    );
    let mut holder = dlock()
        .env("DLOCK_URL", &url)
        .args(["exec", "job", "--ttl", "3s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let token: u64 = read_when_ready(&ready, Duration::from_secs(20))
        .parse()
        .unwrap();
    let victim = victim(&cluster);
    cluster.members[victim].kill();
    // Two TTLs later the holder still holds: its keep-alives reached the new leader.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder lost its lease"
    );
    let other = dlock()
        .env("DLOCK_URL", &url)
        .args(["exec", "job", "--no-wait", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        other.status.code(),
        Some(i32::from(dlock::exit::NOT_OBTAINED)),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    std::fs::write(&go, "").unwrap();
    let status = wait_exit(&mut holder, Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{status:?}");
    // The next holder's token is larger.
    let next = dlock()
        .env("DLOCK_URL", &url)
        .args(["exec", "job", "--", "sh", "-c", "echo $DLOCK_FENCING_TOKEN"])
        .output()
        .unwrap();
    assert!(next.status.success(), "{next:?}");
    let next: u64 = String::from_utf8_lossy(&next.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(next > token, "{token} then {next}");
}

/// With two of three members frozen no keep-alive is answered: exec kills its command
/// before the lease could expire (exit 79), and once the members are back nobody else
/// held the lock meanwhile.
#[test]
fn a_lost_quorum_kills_the_command_before_the_lease_ends() {
    let cluster = EtcdCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!("echo $$ > '{}'; sleep 60", ready.display());
    let mut holder = dlock()
        .env("DLOCK_URL", cluster.url())
        .args(["exec", "job", "--ttl", "3s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid: u32 = read_when_ready(&ready, Duration::from_secs(20))
        .parse()
        .unwrap();
    let frozen_at = std::time::Instant::now();
    cluster.members[1].pause();
    cluster.members[2].pause();
    let status = wait_exit(&mut holder, Duration::from_secs(10)).expect("dlock still runs");
    let took = frozen_at.elapsed();
    assert_eq!(status.code(), Some(i32::from(dlock::exit::LEASE_LOST)));
    assert!(
        !crate::support::alive(pid),
        "the command outlived its lease"
    );
    // The last answered keep-alive was sent at most a third of the TTL before the freeze.
    assert!(took < Duration::from_secs(3), "killed after {took:?}");
    cluster.members[1].resume();
    cluster.members[2].resume();
    let next = dlock()
        .env("DLOCK_URL", cluster.url())
        .args(["exec", "job", "--timeout", "20s", "--", "true"])
        .output()
        .unwrap();
    assert!(next.status.success(), "{next:?}");
}
