//! The etcd backend when members fail: on a 3-member cluster losing the leader (or the
//! member dlock talks to) loses no lock, hands none to two holders and strands no waiter;
//! a lone member restarted keeps the leases shorter outages leave alive.

use std::process::Stdio;
use std::time::Duration;

use crate::support::loops::{self, check_marks, ended, exit_codes, quoted, Unended};
use crate::support::{self, dlock, read_when_ready, wait_exit, wait_for, EtcdCluster, EtcdServer};

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
    a_member_killed_while_a_lock_is_held(leader, EtcdServer::kill);
}

/// The first endpoint of the URL is the one dlock talks to: it must move to another.
#[test]
fn the_members_dlock_talks_to_killed_while_a_lock_is_held() {
    a_member_killed_while_a_lock_is_held(|_| 0, EtcdServer::kill);
}

/// Frozen (SIGSTOP), the member dlock talks to neither answers nor closes the keep-alive
/// stream: the holder's renewals move to another member within the renewal margin.
#[test]
fn the_member_dlock_talks_to_frozen_while_a_lock_is_held() {
    a_member_killed_while_a_lock_is_held(|_| 0, |m| m.pause());
}

/// A holder keeps its lock when the member `victim` picks meets `fault` (SIGKILL, SIGSTOP):
/// no second holder, and the lease lives on through keep-alives to the others.
///
/// The TTL leaves room for an election that a loaded machine slows down (exec stops its
/// command a margin before the lease could expire, counting from the last keep-alive
/// answered): with 3 s, a slow election alone could make the holder stop it.
fn a_member_killed_while_a_lock_is_held(
    victim: fn(&EtcdCluster) -> usize,
    fault: fn(&mut EtcdServer),
) {
    const TTL: Duration = Duration::from_secs(5);
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
        .args(["exec", "job", "--ttl", "5s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let token: u64 = read_when_ready(&ready, Duration::from_secs(20))
        .parse()
        .unwrap();
    let victim = victim(&cluster);
    fault(&mut cluster.members[victim]);
    let killed = std::time::Instant::now();
    // Past the TTL (and the second a new leader adds to every lease) the holder still
    // holds: its keep-alives reached the new leader. It is watched all along, so that a
    // lost lease fails the test when it happens.
    while killed.elapsed() < TTL + Duration::from_secs(2) {
        if holder.try_wait().unwrap().is_some() {
            let out = holder.wait_with_output().unwrap();
            panic!("the holder lost its lease: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nobody else gets it. A member may still be without a leader on a loaded machine
    // (exit 69): asked again until the cluster answers.
    let mut other = None;
    let answered = wait_for(Duration::from_secs(20), || {
        let out = dlock()
            .env("DLOCK_URL", &url)
            .args(["exec", "job", "--no-wait", "--", "true"])
            .output()
            .unwrap();
        let unavailable = out.status.code() == Some(i32::from(dlock::exit::UNAVAILABLE));
        other = Some(out);
        !unavailable
    });
    let other = other.unwrap();
    assert!(answered, "{}", String::from_utf8_lossy(&other.stderr));
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
    let next = support::token_of(dlock().env("DLOCK_URL", &url).args(["exec", "job"]));
    assert!(next > token, "{token} then {next}");
}

/// The earliest time (ms since the Unix epoch) at which the lease of the holder of `key`
/// may expire as `member` sees it, taken right after a keep-alive: the lease's remaining
/// TTL (whole seconds, rounded down) went up between two looks, so the keep-alive came
/// after the first, and the lease lives its granted TTL from then at least.
fn expiry_after_keep_alive(member: &EtcdServer, key: &str, limit: Duration) -> u64 {
    let kvs: serde_json::Value =
        serde_json::from_str(&member.ctl(&["get", &format!("{key}/"), "--prefix", "-w", "json"]))
            .unwrap();
    let lease = kvs["kvs"][0]["lease"]
        .as_u64()
        .expect("the holder's key has a lease");
    let id = format!("{lease:x}");
    let look = || {
        let said = member.ctl(&["lease", "timetolive", &id]);
        let secs = |label: &str| -> u64 {
            let at = said.find(label).unwrap_or_else(|| panic!("{said}")) + label.len();
            said[at..].split('s').next().unwrap().parse().unwrap()
        };
        (secs("TTL("), secs("remaining("))
    };
    let (mut before, mut last) = (crate::support::now_ms(), look().1);
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        let at = crate::support::now_ms();
        let (granted, left) = look();
        if left > last {
            return before + granted * 1000;
        }
        (before, last) = (at, left);
    }
    panic!("no keep-alive seen within {limit:?}");
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
        .args(["exec", "job", "--ttl", "9s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid: u32 = read_when_ready(&ready, Duration::from_secs(20))
        .parse()
        .unwrap();
    // A TTL of whole seconds that spans several of them between keep-alives, so that
    // one is seen as the remaining TTL going up.
    let expires_ms = expiry_after_keep_alive(&cluster.members[0], "job", Duration::from_secs(20));
    let frozen_at = std::time::Instant::now();
    cluster.members[1].pause();
    cluster.members[2].pause();
    let status = wait_exit(&mut holder, Duration::from_secs(20)).expect("dlock still runs");
    let (dead_ms, took) = (crate::support::now_ms(), frozen_at.elapsed());
    assert_eq!(status.code(), Some(i32::from(dlock::exit::LEASE_LOST)));
    assert!(
        !crate::support::alive(pid),
        "the command outlived its lease"
    );
    // Timed from the last keep-alive the cluster answered: the lease's expiry there.
    assert!(
        dead_ms < expires_ms,
        "killed {}ms after the lease could expire ({took:?} after the freeze)",
        dead_ms - expires_ms
    );
    cluster.members[1].resume();
    cluster.members[2].resume();
    let next = dlock()
        .env("DLOCK_URL", cluster.url())
        .args(["exec", "job", "--timeout", "20s", "--", "true"])
        .output()
        .unwrap();
    assert!(next.status.success(), "{next:?}");
}

/// A single member restarted (SIGKILL, then started again on its data) while `exec` holds a
/// lock with a TTL longer than the outage: etcd keeps leases across a restart (it gives them
/// their full TTL again), so the holder keeps the lock, its command is not killed, nobody
/// else gets the lock meanwhile, and the holder's keep-alives reach the member again.
#[test]
fn a_restart_shorter_than_the_ttl_keeps_the_lock() {
    let mut server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let script = format!(
        "echo $DLOCK_FENCING_TOKEN > '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
        ready.display(),
        go.display()
    );
    let mut holder = dlock()
        .env("DLOCK_URL", server.url())
        .args(["exec", "job", "--ttl", "6s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let token: u64 = read_when_ready(&ready, Duration::from_secs(20))
        .parse()
        .unwrap();
    server.restart();
    // Past a renewal (every third of the TTL) and past the TTL counted from before the
    // restart: the keep-alives reached the restarted member.
    std::thread::sleep(Duration::from_secs(7));
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder lost its lease"
    );
    let other = dlock()
        .env("DLOCK_URL", server.url())
        .args(["exec", "job", "--no-wait", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        other.status.code(),
        Some(i32::from(dlock::exit::NOT_OBTAINED)),
        "{other:?}"
    );
    std::fs::write(&go, "").unwrap();
    let status = wait_exit(&mut holder, Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{status:?}");
    let next = support::token_of(dlock().env("DLOCK_URL", server.url()).args(["exec", "job"]));
    assert!(next > token, "{token} then {next}");
}

/// 8 shell loops of `dlock exec` on one key, each command marking its start and end (with
/// its fencing token) in one file, while the leader of the 3-member cluster is SIGKILLed:
/// never two commands inside at once, tokens strictly increasing in the order the commands
/// ran, and commands still run after the kill.
#[test]
fn eight_exec_loops_never_overlap_while_the_leader_is_killed() {
    let mut cluster = EtcdCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let stop = dir.path().join("stop");
    let loop_script = format!(
        "while [ ! -e '{}' ]; do '{}' exec job --ttl 3s -q -- sh -c {}; done",
        stop.display(),
        crate::support::dlock_bin().display(),
        quoted(&loops::section(&marks, "0.01"))
    );
    let mut loops: Vec<_> = (0..8)
        .map(|_| {
            loops::shell(dlock().env("DLOCK_URL", cluster.url()), &loop_script)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let some = wait_for(Duration::from_secs(30), || ended(&marks) >= 10);
    assert!(some, "the loops did not get going");
    let victim = leader(&cluster);
    cluster.members[victim].kill();
    let before = ended(&marks);
    let more = wait_for(Duration::from_secs(30), || ended(&marks) >= before + 20);
    std::fs::write(&stop, "").unwrap();
    for l in &mut loops {
        wait_exit(l, Duration::from_secs(30)).expect("a loop ends");
    }
    assert!(more, "no command ran after the leader was killed");
    check_marks(&std::fs::read_to_string(&marks).unwrap(), Unended::Overlap);
}

/// 6 shell loops of `dlock exec` on one key while the leader is SIGKILLed and restarted 3
/// times, then the member every dlock talks to first is frozen (SIGSTOP) for a while: a
/// quorum is up all along, so **every** exec exits 0 (a leader change, a dead or frozen
/// member is ridden out), one command at a time, tokens increasing, and commands run through
/// every fault.
#[test]
fn every_exec_exits_0_while_the_leader_is_killed_and_a_member_frozen() {
    let mut cluster = EtcdCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let (marks, codes, stop) = (
        dir.path().join("marks"),
        dir.path().join("codes"),
        dir.path().join("stop"),
    );
    let loop_script = format!(
        "while [ ! -e '{}' ]; do '{}' exec job --ttl 6s -q -- sh -c {}; echo $? >> '{}'; done",
        stop.display(),
        crate::support::dlock_bin().display(),
        quoted(&loops::section(&marks, "0.05")),
        codes.display()
    );
    let mut loops: Vec<_> = (0..6)
        .map(|_| {
            loops::shell(dlock().env("DLOCK_URL", cluster.url()), &loop_script)
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let ran = || {
        let codes = std::fs::read_to_string(&codes).unwrap_or_default();
        codes.lines().count()
    };
    // Some execs end after each fault began, and after it ended.
    let more = |n: usize| {
        let before = ran();
        assert!(
            wait_for(Duration::from_secs(20), || ran() >= before + n),
            "no exec ended"
        );
    };
    more(6);
    for _ in 0..3 {
        let victim = leader(&cluster);
        cluster.members[victim].kill();
        more(3);
        cluster.members[victim].restart();
        more(3);
    }
    cluster.members[0].pause();
    more(3);
    cluster.members[0].resume();
    more(3);
    std::fs::write(&stop, "").unwrap();
    for l in &mut loops {
        wait_exit(l, Duration::from_secs(30)).expect("a loop ends");
    }
    let codes = exit_codes(&codes);
    let failed: Vec<u8> = codes.iter().map(|(c, _)| *c).filter(|c| *c != 0).collect();
    assert!(
        failed.is_empty(),
        "exit codes {failed:?} of {} execs",
        codes.len()
    );
    check_marks(&std::fs::read_to_string(&marks).unwrap(), Unended::Overlap);
}

/// A waiter whose member dies while it waits watches again through another member: once
/// the holder unlocks, the waiter runs its command.
#[test]
fn a_waiter_watches_through_another_member_when_its_own_dies() {
    let mut cluster = EtcdCluster::start();
    let url = cluster.url(); // the waiter talks to the first member
    let lock = dlock()
        .env("DLOCK_URL", &url)
        .args(["lock", "job", "--ttl", "1m"])
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    let owner = String::from_utf8_lossy(&lock.stdout).trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut waiter = dlock()
        .env("DLOCK_URL", &url)
        .args(["exec", "job", "-q", "--ttl", "5s", "--", "touch"])
        .arg(&ran)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let queued = wait_for(Duration::from_secs(20), || {
        cluster.members[1]
            .ctl(&["get", "job/", "--prefix", "--keys-only"])
            .lines()
            .filter(|l| !l.is_empty())
            .count()
            == 2
    });
    assert!(queued, "the waiter never queued");
    cluster.members[0].kill();
    // The rest of the cluster names only the living members: unlock through them.
    let others: Vec<String> = cluster.members[1..]
        .iter()
        .map(EtcdServer::endpoint)
        .collect();
    let unlocked = dlock()
        .env("DLOCK_URL", format!("etcd://{}", others.join(",")))
        .args(["unlock", "job", "--owner", &owner])
        .output()
        .unwrap();
    assert!(unlocked.status.success(), "{unlocked:?}");
    let status = wait_exit(&mut waiter, Duration::from_secs(15)).expect("the waiter ran");
    assert!(status.success(), "{status:?}");
    assert!(ran.exists());
}
