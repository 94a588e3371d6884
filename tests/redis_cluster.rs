//! `dlock` on a real Redis Cluster (three masters, three replicas) when the cluster moves
//! under it: a lock's slot migrated to another master while the lock is held, and a master
//! lost while `exec` runs. Mutual exclusion must hold throughout: a second holder's command
//! checks that the first one's is gone before it does anything.

use std::path::Path;
use std::time::Duration;

use crate::support::{
    self, alive, loops, send_signal, wait_exit, wait_for, Reaped, RedisCluster, Store,
};

/// Makes a `dlock` command pointed at the store under test.
pub(crate) type Dlock<'a> = &'a dyn Fn() -> std::process::Command;

fn cluster(store: &Store) -> &RedisCluster {
    match store {
        Store::RedisCluster(c) => c,
        _ => unreachable!(),
    }
}

/// A second `exec` of `key` that waits for it and, once it runs, records whether the first
/// holder's command (`first`) was still alive: `overlap` is written only if it was; `name`
/// is written when it ran.
pub(crate) fn contender(dlock: Dlock, key: &str, first: u32, dir: &Path, name: &str) -> Reaped {
    let script = format!(
        "if kill -0 {first} 2>/dev/null; then echo both > '{d}/overlap'; fi; echo ran > '{d}/{name}'",
        d = dir.display()
    );
    let child = dlock()
        .args([
            "exec",
            key,
            "--timeout",
            "60s",
            "-q",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    Reaped(child)
}

/// Waits until `status KEY --json` lists a waiter: a [`contender`] has queued.
pub(crate) fn await_queued(dlock: Dlock, key: &str) {
    let queued = wait_for(Duration::from_secs(10), || {
        let out = dlock().args(["status", key, "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["waiters"].as_array().is_some_and(|w| !w.is_empty())
    });
    assert!(queued, "the waiter never queued on {key}");
}

/// The owner column of `status KEY --json`, or `None` when free.
fn owner_of(store: &Store, key: &str) -> Option<String> {
    let out = store
        .dlock()
        .args(["status", key, "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    v["owner"].as_str().map(String::from)
}

fn node_id(node: &support::RedisServer) -> String {
    node.cli(&["CLUSTER", "MYID"])
}

/// The lease of a held lock survives its slot moving to another master key by key (so that
/// for a while its keys are split between two masters: `ASK` and `TRYAGAIN`); renewals keep
/// it, another `exec -n` is refused on the new master, and release works there.
#[test]
fn a_slot_migrated_while_held_keeps_the_lease() {
    let store = Store::redis_cluster();
    let c = cluster(&store);
    let dir = tempfile::tempdir().unwrap();
    let key = "moving";
    let lease = format!("dlock:{{{key}}}:lease");
    let (dlock, pid) = store.hold(key, "1500ms", dir.path());
    let mut dlock = Reaped(dlock);
    let owner = owner_of(&store, key).expect("held");
    let slot = c.nodes[0].cli(&["CLUSTER", "KEYSLOT", &lease]);
    let source = c.master_of(&lease);
    let target = c
        .nodes
        .iter()
        .find(|n| n.port != source.port && n.cli(&["ROLE"]).starts_with("master"))
        .unwrap();
    let (source_id, target_id) = (node_id(source), node_id(target));
    assert_eq!(
        target.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]),
        "OK"
    );
    assert_eq!(
        source.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]),
        "OK"
    );
    // One key at a time, the lease first, each move followed by more than a renewal period
    // with the lock's keys split between the two masters.
    let mut keys: Vec<String> = source
        .cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"])
        .lines()
        .map(String::from)
        .collect();
    keys.sort_by_key(|k| !k.ends_with(":lease"));
    assert!(keys.contains(&lease), "{keys:?}");
    let port = target.port.to_string();
    for k in &keys {
        let moved = source.cli(&["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", k]);
        assert_eq!(moved, "OK", "MIGRATE {k}");
        std::thread::sleep(Duration::from_millis(800));
        assert!(alive(pid), "the command was killed while {k} moved");
    }
    // Masters only: a replica refuses SETSLOT and learns the owner from its master.
    let masters = c
        .nodes
        .iter()
        .filter(|n| n.cli(&["ROLE"]).starts_with("master"));
    for node in masters {
        node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    }
    assert_eq!(
        target.cli(&["EXISTS", &lease]),
        "1",
        "the lease is on the new master"
    );
    // Several TTLs later the lease is still ours, renewed on the new master.
    std::thread::sleep(Duration::from_secs(3));
    assert!(alive(pid), "the command must still run");
    assert_eq!(owner_of(&store, key).as_deref(), Some(owner.as_str()));
    let second = store
        .dlock()
        .args(["exec", key, "-n", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(75), "{second:?}");
    // Release on the new master: the command ends, dlock releases, the lock is free.
    send_signal(pid, "TERM");
    let status = wait_exit(&mut dlock.0, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(143), "the command's own end (SIGTERM)");
    assert_eq!(owner_of(&store, key), None, "released");
    assert_eq!(target.cli(&["EXISTS", &lease]), "0");
}

/// A master is lost while `exec` holds a lock on it and a second `exec` waits for the lock,
/// and its replica is promoted. Either the lease survives on the promoted replica (the
/// command keeps running, and the waiter runs only after it ends) or dlock kills the command
/// with exit 79; never are both commands running. The test says which case it met.
fn master_lost_while_exec_runs(ttl: &str, lose: impl FnOnce(&RedisCluster, usize, usize)) {
    let store = Store::redis_cluster();
    let c = cluster(&store);
    let dir = tempfile::tempdir().unwrap();
    let key = "failover";
    let lease = format!("dlock:{{{key}}}:lease");
    let (dlock, pid) = store.hold(key, ttl, dir.path());
    let dlock = Reaped(dlock);
    let master = c.master_of(&lease);
    // The lease is on the replica before the master goes.
    assert_eq!(master.cli(&["WAIT", "1", "5000"]), "1", "replica in sync");
    let (m, r) = (c.index_of(master.port), c.replica_of(master.port));
    // A waiter queued on the master that goes: it keeps trying until the replica takes over.
    let early = contender(&|| store.dlock(), key, pid, dir.path(), "early");
    await_queued(&|| store.dlock(), key);
    lose(c, m, r);
    let promoted = wait_for(Duration::from_secs(30), || {
        c.nodes[r].cli(&["ROLE"]).starts_with("master")
    });
    assert!(promoted, "the replica was not promoted");
    settle(&|| store.dlock(), dlock, pid, dir.path(), early);
}

/// After a failover: either the lease survived (the command still runs; no waiter ran) and
/// the command is ended now, or dlock killed it with exit 79. Then a waiter started after
/// the failover runs, so does the one queued before it (it rode the failover out), and no
/// two commands ever ran at once (an overlap fails the test in either case). Says which
/// case it met.
pub(crate) fn settle(cmd: Dlock, mut dlock: Reaped, pid: u32, dir: &Path, mut early: Reaped) {
    let key = "failover";
    let _late = contender(cmd, key, pid, dir, "late");
    // Past the promotion and several TTLs: the case is settled one way or the other.
    let settled = wait_exit(&mut dlock.0, Duration::from_secs(8));
    let ran = dir.join("late");
    let overlap = dir.join("overlap");
    match settled {
        None => {
            eprintln!("case met: the lease survived on the promoted replica");
            assert!(alive(pid), "the command must still run");
            let early_ran = dir.join("early").exists();
            assert!(
                !ran.exists() && !early_ran,
                "a waiter ran while the lease was held"
            );
            send_signal(pid, "TERM");
            wait_exit(&mut dlock.0, Duration::from_secs(10)).expect("dlock exits");
        }
        Some(status) => {
            eprintln!("case met: the lease was lost, the command killed (exit 79)");
            assert_eq!(status.code(), Some(79), "{status:?}");
            assert!(!alive(pid), "the command must be dead");
        }
    }
    assert!(
        wait_for(Duration::from_secs(30), || ran.exists()),
        "the waiter never ran"
    );
    // The waiter queued on the lost master rode the failover out and ran too.
    let early = wait_exit(&mut early.0, Duration::from_secs(30)).expect("the early waiter ends");
    assert_eq!(early.code(), Some(0), "{early:?}");
    assert!(dir.join("early").exists());
    // Whatever else happened, two commands never ran at once.
    assert!(!overlap.exists(), "both commands ran at once");
}

/// The master is killed (SIGKILL); the cluster fails it over to its replica by itself.
#[test]
fn a_master_killed_while_exec_runs_never_runs_two_holders() {
    master_lost_while_exec_runs("10s", |c, m, _| {
        let node = &c.nodes[m];
        send_signal(node.pid().unwrap(), "KILL");
    });
}

/// The replica takes over on request (`CLUSTER FAILOVER`, the master still up).
#[test]
fn a_replica_promoted_while_exec_runs_never_runs_two_holders() {
    master_lost_while_exec_runs("2s", |c, _, r| {
        assert_eq!(c.nodes[r].cli(&["CLUSTER", "FAILOVER"]), "OK");
    });
}

/// `status` with no key lists the held locks of every master, and a named key on each.
#[test]
fn status_lists_locks_on_every_master() {
    let store = Store::redis_cluster();
    let c = cluster(&store);
    let dir = tempfile::tempdir().unwrap();
    // One key per master, found by asking the cluster where each candidate's slot lives.
    let mut keys: Vec<(String, u16)> = Vec::new();
    for i in 0..100 {
        let key = format!("job-{i}");
        let port = c.master_of(&format!("dlock:{{{key}}}:lease")).port;
        if !keys.iter().any(|(_, p)| *p == port) {
            keys.push((key, port));
        }
        if keys.len() == 3 {
            break;
        }
    }
    assert_eq!(keys.len(), 3, "keys on three masters: {keys:?}");
    let _holders: Vec<Reaped> = keys
        .iter()
        .map(|(key, _)| Reaped(store.hold(key, "30s", dir.path()).0))
        .collect();
    let out = store.dlock().args(["status", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Vec<String> = support::text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| v["key"].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = keys.into_iter().map(|(k, _)| k).collect();
    want.sort();
    assert_eq!(listed, want);
}

/// A Cluster that wants a password and speaks TLS (`rediss+cluster://:PASSWORD@…`, the
/// private CA in `DLOCK_TLS_CA`): `exec` runs on keys of every master, `status` lists a held
/// lock, the password shows nowhere (not even in the command's environment), and a wrong
/// password is one line, exit 69, naming the key and the Cluster.
#[test]
fn a_cluster_with_a_password_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = support::pki(dir.path()).expect("openssl makes the test certificates");
    let password = "cl-s3cret-pw";
    let c = RedisCluster::start_secured(&support::Secured {
        password,
        pki: &pki,
    });
    let dlock = |url: &str| {
        let mut d = support::dlock();
        d.env("DLOCK_URL", url).env("DLOCK_TLS_CA", &pki.ca);
        d.env_remove("DLOCK_TLS_CERT").env_remove("DLOCK_TLS_KEY");
        d
    };
    let url = c.secured_url(password);
    let mut seen = String::new();
    for key in ["a", "b", "c", "d", "e", "f"] {
        let out = dlock(&url)
            .args([
                "exec",
                key,
                "--",
                "sh",
                "-c",
                "echo $DLOCK_FENCING_TOKEN; env",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{key}: {out:?}");
        seen.push_str(&support::text(&out.stdout));
        seen.push_str(&support::text(&out.stderr));
    }
    let masters: std::collections::HashSet<u16> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|k| c.master_of(&format!("dlock:{{{k}}}:lease")).port)
        .collect();
    assert!(masters.len() > 1, "the keys all live on one master");
    let locked = dlock(&url)
        .args(["lock", "held", "--ttl", "30s"])
        .output()
        .unwrap();
    assert!(locked.status.success(), "{locked:?}");
    let status = dlock(&url).args(["status", "--json"]).output().unwrap();
    let listed = support::text(&status.stdout);
    assert!(listed.contains("\"key\":\"held\""), "{status:?}");
    let bad = dlock(&c.secured_url("wrong-pw-77"))
        .args(["exec", "k", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(69), "{bad:?}");
    let err = support::text(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("'k'") && err.contains("rediss+cluster://"),
        "{err}"
    );
    for out in [&locked, &status, &bad] {
        seen.push_str(&support::text(&out.stdout));
        seen.push_str(&support::text(&out.stderr));
    }
    assert!(
        !seen.contains(password) && !seen.contains("wrong-pw-77"),
        "a password shows: {seen}"
    );
}

/// Shell loops of `dlock exec job` on a Cluster, each command marking its start (with its
/// fencing token) and end in one file, and `overlap` there when the command that started
/// before it is still alive, a zombie aside (a command killed for a lost lease never marks
/// its end); each
/// exit code is written with dlock's stderr to another file. Stopped (and their files read)
/// by [`ExecLoops::finish`]; dropped early (a failed assertion), they are told to stop.
struct ExecLoops {
    dir: std::path::PathBuf,
    loops: Vec<Reaped>,
}

impl ExecLoops {
    fn start(url: &str, dir: &Path, count: usize) -> ExecLoops {
        let marks = dir.join("marks");
        let section = format!(
            "p=$(cat '{h}' 2>/dev/null); s=$(cut -d' ' -f3 \"/proc/$p/stat\" 2>/dev/null); \
             if [ -n \"$p\" ] && [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo \"overlap $$ $p\" >> '{m}'; fi; echo $$ > '{h}'; \
             {marked}",
            m = marks.display(),
            h = dir.join("holder").display(),
            marked = loops::section(&marks, "0.4"),
        );
        let loops = (0..count)
            .map(|i| {
                let script = format!(
                    "while [ ! -e '{d}/stop' ]; do '{bin}' exec job --ttl 1s --timeout 60s -q \
                     -- sh -c {section} 2> '{d}/err-{i}'; c=$?; \
                     echo \"$c $(date +%s.%N) $(tr '\\n' ' ' < '{d}/err-{i}')\" >> '{d}/codes'; done",
                    d = dir.display(),
                    bin = support::dlock_bin().display(),
                    section = loops::quoted(&section),
                );
                let sh = loops::shell(support::dlock().env("DLOCK_URL", url), &script)
                    .stdin(std::process::Stdio::null())
                    .spawn();
                Reaped(sh.unwrap())
            })
            .collect();
        ExecLoops {
            dir: dir.to_path_buf(),
            loops,
        }
    }

    /// How many commands ran to their end.
    fn runs(&self) -> usize {
        loops::ended(&self.dir.join("marks"))
    }

    /// Waits until `more` commands have run since now (`when` names the moment).
    fn await_runs(&self, more: usize, when: &str) {
        let want = self.runs() + more;
        let ran = wait_for(Duration::from_secs(40), || self.runs() >= want);
        assert!(ran, "{more} more commands did not run {when}");
    }

    /// Stops the loops, then checks the marks: never two commands inside at once, tokens
    /// rising in the order the commands ran. Returns every exit code with its loop's
    /// time and stderr.
    fn finish(mut self) -> Vec<(u8, String)> {
        std::fs::write(self.dir.join("stop"), "").unwrap();
        for l in &mut self.loops {
            wait_exit(&mut l.0, Duration::from_secs(70)).expect("a loop ends");
        }
        let log = std::fs::read_to_string(self.dir.join("marks")).unwrap();
        loops::check_marks(&log, loops::Unended::Killed);
        loops::exit_codes(&self.dir.join("codes"))
    }
}

impl Drop for ExecLoops {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("stop"), "");
    }
}

/// Says when a phase of a fault test began (the exit codes carry the same clock).
fn phase(what: &str) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    eprintln!("{:.3} {what}", now.unwrap().as_secs_f64());
}

/// Waits until the node `i` says it is a master.
fn await_master(c: &RedisCluster, i: usize, after: &str) {
    let promoted = wait_for(Duration::from_secs(30), || {
        c.nodes[i].cli(&["ROLE"]).starts_with("master")
    });
    assert!(promoted, "node {i} was not promoted after {after}");
}

/// Five `exec` loops on one key of a Cluster with `?min_replicas=1` while the key's slot
/// fails over three ways: a `CLUSTER FAILOVER` on its replica, its master paused (SIGSTOP)
/// until the replica takes over, and its master killed and restarted. Every `exec` exits 0
/// (79 only for a lease really lost, and even then no two commands ever ran at once): a
/// reply met while the slot moves (a redirection, `CLUSTERDOWN`, `TRYAGAIN`, `READONLY`,
/// `LOADING`, a dropped connection) is tried again on the new slot map.
#[test]
fn exec_loops_ride_out_every_failover_of_their_slot() {
    let mut c = RedisCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let loops = ExecLoops::start(&format!("{}?min_replicas=1", c.url()), dir.path(), 5);
    loops.await_runs(10, "before any fault");
    let m = c.index_of(c.master_of("dlock:{job}:lease").port);
    let r = c.replica_of(c.nodes[m].port);
    phase("(a) CLUSTER FAILOVER");
    // (a) The replica takes over on request, the master still up.
    assert_eq!(c.nodes[r].cli(&["CLUSTER", "FAILOVER"]), "OK");
    await_master(&c, r, "CLUSTER FAILOVER");
    c.await_ready(Duration::from_secs(30)).unwrap();
    loops.await_runs(10, "after CLUSTER FAILOVER");
    phase("(b) the master paused");
    // (b) The master (r now) paused until its replica (m) takes over.
    c.nodes[r].pause();
    await_master(&c, m, "its master was paused");
    c.nodes[r].resume();
    phase("(b) resumed");
    c.await_ready(Duration::from_secs(30)).unwrap();
    loops.await_runs(10, "after the paused master came back");
    phase("(c) the master killed");
    // (c) The master (m again) killed, its replica promoted, the master restarted.
    c.nodes[m].kill();
    await_master(&c, r, "its master was killed");
    c.nodes[m].restart();
    phase("(c) restarted");
    c.await_ready(Duration::from_secs(30)).unwrap();
    loops.await_runs(10, "after the killed master came back");
    phase("done");
    let url = format!("{}?min_replicas=1", c.url());
    let codes = loops.finish();
    let codes: Vec<_> = codes
        .into_iter()
        .map(|(code, line)| (code, line.replace(&url, "URL")))
        .collect();
    let failed: Vec<_> = codes.iter().filter(|(code, _)| *code != 0).collect();
    let lost = failed.iter().filter(|(code, _)| *code == 79).count();
    eprintln!("{} runs, {lost} lost their lease (79)", codes.len());
    assert!(
        failed.iter().all(|(code, _)| *code == 79),
        "an exec failed:\n{failed:#?}"
    );
}
