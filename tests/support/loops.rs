//! Contending `exec` loops, the harness of the fault tests: shell loops of `dlock exec` on
//! one key whose commands mark their start (with their fencing token) and their end in one
//! file, the exit codes the loops write down, and the one check of those marks. Each test
//! keeps its own faults and its own loop condition. Also the two faults every session lock
//! (`?lock=advisory`, `?lock=get_lock`) is tested under, written once for both servers:
//! [`paused_past_the_bound`] and [`session_ended_by_an_administrator`].

use std::path::Path;
use std::process::Command;

/// The command each loop runs under the lock: `start PID TOKEN`, a pause of `pause`
/// seconds, then `end PID`, appended to `marks`.
pub fn section(marks: &Path, pause: &str) -> String {
    format!(
        "echo \"start $$ $DLOCK_FENCING_TOKEN\" >> '{m}'; sleep {pause}; echo \"end $$\" >> '{m}'",
        m = marks.display()
    )
}

/// `s` as one single-quoted shell word.
pub fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `sh -c SCRIPT` with the environment `dlock` has (the harness's clean one, and what its
/// caller set, such as `DLOCK_URL`), for scripts that call dlock themselves through
/// [`super::dlock_bin`].
pub fn shell(dlock: &Command, script: &str) -> Command {
    let mut sh = Command::new("sh");
    sh.args(["-c", script]);
    for (k, v) in dlock.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// How many commands have marked their end in `marks` (none while it does not exist).
pub fn ended(marks: &Path) -> usize {
    read(marks).lines().filter(|l| l.starts_with("end")).count()
}

/// The lines `CODE[ REST]` the loops appended to `codes`, one an exec: its exit code and
/// whatever the loop wrote after it (empty when nothing).
pub fn exit_codes(codes: &Path) -> Vec<(u8, String)> {
    read(codes)
        .lines()
        .map(|line| {
            let (code, rest) = line.split_once(' ').unwrap_or((line, ""));
            (code.parse().expect("an exit code"), rest.to_string())
        })
        .collect()
}

/// What a `start` mark means while the command before it has not marked its end.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Unended {
    /// Every command marks its end: two holders at once.
    Overlap,
    /// The command before was killed (for a lost lease) before it could mark its end; the
    /// loops write `overlap` themselves when it is still alive.
    Killed,
}

/// Checks a log of `start PID TOKEN` / `end PID` marks: never two commands inside at once
/// (an `overlap` mark, or a start before the last one's end where `unended` says so), an
/// `end` only for the last start, tokens strictly rising in the order the commands ran.
pub fn check_marks(log: &str, unended: Unended) {
    let mut inside: Option<&str> = None;
    let mut last_token = 0u64;
    for line in log.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("overlap"), _, _) => panic!("two holders at once ({line}):\n{log}"),
            (Some("start"), Some(pid), Some(token)) => {
                if unended == Unended::Overlap {
                    assert!(inside.is_none(), "two holders at once:\n{log}");
                }
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
            _ => panic!("bad mark {line:?}:\n{log}"),
        }
    }
}

/// Eight loops of six turns on one lock, alternately `dlock exec KEY` on `url` and an
/// application's turn: `app_step(section)` is a shell command that takes the same lock the
/// application's way, runs the shell script `section` under it and releases it; it is called
/// once, before the loops start. Asserts that all 48 commands ran, never two at once, and
/// that dlock's tokens rise (an application's take has none: its marks carry token 0 and
/// are checked for overlap only).
pub fn mixed(url: &str, key: &str, marks: &Path, app_step: impl FnOnce(&str) -> String) {
    let section = section(marks, "0.02");
    let app_section = format!(
        "echo \"start $$ 0\" >> '{m}'; sleep 0.02; echo \"end $$\" >> '{m}'",
        m = marks.display()
    );
    // Built once, before any loop starts: a step that writes a file (MariaDB's script) must
    // not rewrite it under a loop already reading it.
    let app = app_step(&app_section);
    let dlock = super::dlock();
    let kids: Vec<_> = (0..8)
        .map(|i| {
            let step = match i % 2 {
                0 => format!(
                    "{} -u {} exec {} -- sh -c {}",
                    quoted(super::dlock_bin().to_str().unwrap()),
                    quoted(url),
                    quoted(key),
                    quoted(&section)
                ),
                _ => app.clone(),
            };
            let script = format!("for i in 1 2 3 4 5 6; do {step} || exit 1; done");
            let mut sh = shell(&dlock, &script);
            sh.stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for mut k in kids {
        let st = super::wait_exit(&mut k, std::time::Duration::from_secs(120));
        let st = st.expect("the loops end");
        assert!(st.success(), "{st}: {}", super::stderr_of(k));
    }
    let log = read(marks);
    assert_eq!(ended(marks), 48, "{log}");
    let mut inside = false;
    for line in log.lines() {
        match line.split_whitespace().next() {
            Some("start") => {
                assert!(!inside, "two holders at once:\n{log}");
                inside = true;
            }
            Some("end") => inside = false,
            _ => panic!("bad mark {line:?}"),
        }
    }
    let dlock_only: String = log
        .lines()
        .collect::<Vec<_>>()
        .chunks(2)
        .filter(|pair| !pair[0].ends_with(" 0"))
        .flat_map(|pair| pair.iter().map(|l| format!("{l}\n")))
        .collect();
    check_marks(&dlock_only, Unended::Overlap);
}

#[test]
fn marks_one_at_a_time_with_rising_tokens_pass() {
    let log = "start 1 5\nend 1\nstart 2 6\nend 2\n";
    check_marks(log, Unended::Overlap);
    check_marks("start 1 5\nstart 2 6\nend 2\n", Unended::Killed);
}

#[test]
#[should_panic(expected = "two holders at once")]
fn a_start_before_the_last_end_is_two_holders() {
    check_marks("start 1 5\nstart 2 6\nend 2\nend 1\n", Unended::Overlap);
}

#[test]
#[should_panic(expected = "two holders at once")]
fn an_overlap_mark_is_two_holders() {
    check_marks("start 1 5\noverlap 2 1\nstart 2 6\n", Unended::Killed);
}

#[test]
#[should_panic(expected = "token 5 after 6")]
fn a_token_that_does_not_rise_fails() {
    check_marks("start 1 6\nend 1\nstart 2 5\nend 2\n", Unended::Overlap);
}

/// A session lock (`?lock=advisory`, `?lock=get_lock`) held with `--ttl 3s` while its
/// server is paused (SIGSTOP): CMD must be dead before the server could end the session and
/// let another client take the lock, that is within the TTL of the last check the server
/// answered, which came before the pause. CMD's own death is timed, not dlock's exit that
/// follows it: CMD writes its pid, then is gone or a zombie.
pub fn paused_past_the_bound(url: &str, pause: impl FnOnce(), resume: impl FnOnce()) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let cmd = format!(
        "echo $$ > '{p}.new' && mv '{p}.new' '{p}' && exec sleep 30",
        p = pid_file.display()
    );
    let mut held = super::exec_on(url, &["--ttl", "3s", "paused", "--", "sh", "-c", &cmd])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(super::wait_for(Duration::from_secs(10), || pid_file.exists()));
    let pid: u32 = read(&pid_file).trim().parse().unwrap();
    let paused = Instant::now();
    pause();
    let dead = super::wait_for(Duration::from_secs(6), || !super::alive(pid));
    let took = paused.elapsed();
    let status = super::wait_exit(&mut held, Duration::from_secs(6));
    resume();
    assert!(dead, "CMD still ran 6 s into the pause");
    let status = status.expect("dlock exits once CMD is dead");
    assert_eq!(status.code(), Some(79), "{}", super::stderr_of(held));
    assert!(
        took < Duration::from_secs(3),
        "CMD died {took:?} into the pause"
    );
}

/// A session lock (`?lock=advisory`, `?lock=get_lock`) on key `job` whose holding session
/// an administrator ends (`end`: `pg_terminate_backend`, `KILL`): CMD is killed at once,
/// exit 79, and it ran once.
pub fn session_ended_by_an_administrator(url: &str, end: impl FnOnce()) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let (started, ended) = (dir.path().join("started"), dir.path().join("ended"));
    let cmd = format!(
        "echo x >> '{}'; sleep 30; touch '{}'",
        started.display(),
        ended.display()
    );
    let mut held = super::exec_on(url, &["--ttl", "30s", "job", "--", "sh", "-c", &cmd])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(super::wait_for(Duration::from_secs(10), || started.exists()));
    let killed = Instant::now();
    end();
    let status = super::wait_exit(&mut held, Duration::from_secs(5)).expect("exec ends at once");
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(status.code(), Some(79), "{}", super::stderr_of(held));
    assert!(!ended.exists());
    assert_eq!(read(&started).lines().count(), 1, "nothing runs twice");
}
