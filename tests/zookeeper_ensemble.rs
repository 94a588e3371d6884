//! A 3-server ZooKeeper ensemble whose leader is killed and restarted, again and again,
//! while `dlock exec` loops contend for one key: every exec gets its turn (exit 0), never
//! two commands at once, tokens rising in the order the commands ran.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{dlock, dlock_bin, wait_exit, wait_for, ZkEnsemble};

/// How many `exec` loops contend, and how many runs each makes at least.
const LOOPS: usize = 6;
const RUNS_EACH: usize = 3;
/// How many times the leader is killed and restarted.
const KILLS: usize = 3;

/// A shell loop of `dlock exec job` on `url`: each command marks its start (with its token)
/// and its end in `dir/marks`; each exec's exit code goes to `dir/exits`, its stderr to
/// `dir/errors`. It runs `RUNS_EACH` times at least, then until `dir/stop` exists.
fn exec_loop(url: &str, dir: &Path) -> Child {
    let (marks, exits, errors, stop) = (
        dir.join("marks"),
        dir.join("exits"),
        dir.join("errors"),
        dir.join("stop"),
    );
    let section = format!(
        "echo \"start $$ $DLOCK_FENCING_TOKEN\" >> '{m}'; sleep 0.05; echo \"end $$\" >> '{m}'",
        m = marks.display()
    );
    let script = format!(
        "i=0; while [ $i -lt {RUNS_EACH} ] || [ ! -e '{stop}' ]; do i=$((i+1)); \
         '{bin}' exec job -q --ttl 10s -w 120s -- sh -c '{section}' 2>> '{errors}'; \
         echo \"exit $?\" >> '{exits}'; done",
        stop = stop.display(),
        bin = dlock_bin().display(),
        section = section.replace('\'', "'\\''"),
        errors = errors.display(),
        exits = exits.display(),
    );
    let mut sh = Command::new("sh");
    // The clean environment of the harness's `dlock` command.
    for (k, v) in dlock().get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh.args(["-c", &script])
        .env("DLOCK_URL", url)
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
    read(&dir.join("marks"))
        .lines()
        .filter(|l| l.starts_with("end"))
        .count()
}

/// Checks the marks: one command inside at a time, tokens strictly rising.
fn assert_one_at_a_time(log: &str) {
    let mut inside: Option<&str> = None;
    let mut last_token = 0u64;
    for line in log.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("start"), Some(pid), Some(token)) => {
                assert!(inside.is_none(), "two holders at once:\n{log}");
                let token: u64 = token.parse().unwrap();
                assert!(
                    token > last_token,
                    "token {token} after {last_token}:\n{log}"
                );
                (inside, last_token) = (Some(pid), token);
            }
            (Some("end"), Some(pid), None) => {
                assert_eq!(inside, Some(pid), "an end without its start:\n{log}");
                inside = None;
            }
            _ => panic!("bad mark {line:?}"),
        }
    }
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
    let exits = read(&dir.join("exits"));
    let errors = read(&dir.join("errors"));
    let runs = exits.lines().count();
    assert!(runs >= LOOPS * RUNS_EACH, "only {runs} runs: {exits}");
    assert!(
        exits.lines().all(|l| l == "exit 0"),
        "an exec failed:\n{exits}\n{errors}"
    );
    assert_one_at_a_time(&read(&dir.join("marks")));
}
