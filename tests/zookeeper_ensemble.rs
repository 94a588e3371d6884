//! A 3-server ZooKeeper ensemble whose leader is killed and restarted, again and again,
//! while `dlock exec` loops contend for one key: every exec gets its turn (exit 0), never
//! two commands at once, tokens rising in the order the commands ran.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::loops::{self, check_marks, ended, exit_codes, quoted, Unended};
use crate::support::{dlock, dlock_bin, wait_exit, wait_for, ZkEnsemble};

/// How many `exec` loops contend, and how many runs each makes at least.
const LOOPS: usize = 6;
const RUNS_EACH: usize = 3;
/// How many times the leader is killed and restarted.
const KILLS: usize = 3;

/// A shell loop of `dlock exec job` on `url`: each command marks its start (with its token)
/// and its end in `dir/marks`; each exec's exit code goes to `dir/codes`, its stderr to
/// `dir/errors`. It runs `RUNS_EACH` times at least, then until `dir/stop` exists.
fn exec_loop(url: &str, dir: &Path) -> Child {
    let script = format!(
        "i=0; while [ $i -lt {RUNS_EACH} ] || [ ! -e '{stop}' ]; do i=$((i+1)); \
         '{bin}' exec job -q --ttl 10s -w 120s -- sh -c {section} 2>> '{errors}'; \
         echo $? >> '{codes}'; done",
        stop = dir.join("stop").display(),
        bin = dlock_bin().display(),
        section = quoted(&loops::section(&dir.join("marks"), "0.05")),
        errors = dir.join("errors").display(),
        codes = dir.join("codes").display(),
    );
    loops::shell(dlock().env("DLOCK_URL", url), &script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// How many commands have ended.
fn ran(dir: &Path) -> usize {
    ended(&dir.join("marks"))
}

#[test]
fn six_exec_loops_all_succeed_while_the_leader_is_killed_and_restarted() {
    let mut ensemble = ZkEnsemble::start();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut loops: Vec<Child> = (0..LOOPS)
        .map(|_| exec_loop(&ensemble.url(), dir))
        .collect();
    let some = wait_for(Duration::from_secs(30), || ran(dir) >= LOOPS);
    assert!(
        some,
        "the loops did not get going: {}",
        read(&dir.join("errors"))
    );
    for round in 0..KILLS {
        let mut leader = None;
        assert!(
            wait_for(Duration::from_secs(30), || {
                leader = ensemble.leader();
                leader.is_some()
            }),
            "no leader before kill {round}"
        );
        let victim = leader.unwrap();
        ensemble.servers[victim].kill();
        let before = ran(dir);
        let served = wait_for(Duration::from_secs(30), || ran(dir) >= before + 2);
        assert!(served, "no command ran with the leader {victim} dead");
        ensemble.servers[victim].restart();
        let before = ran(dir);
        let served = wait_for(Duration::from_secs(30), || ran(dir) >= before + 2);
        assert!(served, "no command ran after {victim} came back");
    }
    std::fs::write(dir.join("stop"), "").unwrap();
    for l in &mut loops {
        wait_exit(l, Duration::from_secs(60)).expect("a loop ends");
    }
    let codes = exit_codes(&dir.join("codes"));
    let errors = read(&dir.join("errors"));
    let runs = codes.len();
    assert!(runs >= LOOPS * RUNS_EACH, "only {runs} runs: {codes:?}");
    assert!(
        codes.iter().all(|(code, _)| *code == 0),
        "an exec failed:\n{codes:?}\n{errors}"
    );
    check_marks(&read(&dir.join("marks")), Unended::Overlap);
}
