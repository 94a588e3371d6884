//! Semaphores (`--limit N`) and shared locks (`-s, --shared`) on every backend: never more
//! than N holders, never a writer beside anyone, tokens never handed out twice (also while
//! holders are SIGKILLed), callers that disagree on N refused, and first come first served
//! where waiters queue ([`Store::caps`]).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{
    dlock_bin, read_when_ready, send_signal, text, wait_exit, wait_for, Store, ECHO_TOKEN,
};

on_every_backend!(
    a_semaphore_admits_n_and_queues_the_next,
    callers_that_disagree_on_the_limit_are_refused,
    readers_share_and_a_queued_writer_stops_later_readers,
    a_killed_holder_frees_its_slot,
    contending_semaphore_loops_never_exceed_the_limit,
    contending_readers_and_writers_never_overlap,
    status_lists_each_waiter_with_the_sharing_it_asks_for,
);

/// Starts `dlock exec KEY FLAGS… -- sh -c SCRIPT` and waits until the command runs;
/// returns dlock and the command's pid. `tag` tells holders of one key apart.
fn hold(
    store: &Store,
    key: &str,
    flags: &[&str],
    script: &str,
    dir: &Path,
    tag: &str,
) -> (Child, u32) {
    let ready = dir.join(format!("ready-{tag}"));
    let child = store
        .dlock()
        .args(["exec", key])
        .args(flags)
        .args(["--", "sh", "-c"])
        .arg(format!("echo $$ > '{}'; {script}", ready.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = read_when_ready(&ready, Duration::from_secs(20))
        .parse()
        .unwrap();
    (child, pid)
}

/// A script that waits until `go` exists.
fn until(go: &Path) -> String {
    format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display())
}

/// `dlock --json status KEY`, parsed.
fn status(store: &Store, key: &str) -> serde_json::Value {
    let out = store
        .dlock()
        .args(["--json", "status", key])
        .output()
        .unwrap();
    let line = text(&out.stdout);
    serde_json::from_str(line.lines().next().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// `dlock status KEY`, as printed.
fn status_text(store: &Store, key: &str) -> String {
    text(&store.dlock().args(["status", key]).output().unwrap().stdout)
}

fn waiters(store: &Store, key: &str) -> usize {
    status(store, key)["waiters"].as_array().map_or(0, Vec::len)
}

/// Starts `dlock -v exec ARGS` (stdout piped, stderr to a file in `dir`) and waits until it
/// waits for `key`: in the queue where the store keeps one, else by its `-v` line.
fn waiting(store: &Store, key: &str, args: &[&str], dir: &Path, tag: &str) -> Child {
    let err = dir.join(format!("{tag}.err"));
    let child = store
        .dlock()
        .arg("-v")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let line = format!("waiting for '{key}'");
    let waits = wait_for(Duration::from_secs(10), || {
        if store.caps().queue {
            waiters(store, key) == 1
        } else {
            std::fs::read_to_string(&err).is_ok_and(|e| e.contains(&line))
        }
    });
    let seen = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(waits, "{tag} never waited: {seen}");
    child
}

fn code(store: &Store, args: &[&str]) -> (Option<i32>, String) {
    let out = store.dlock().args(args).output().unwrap();
    (out.status.code(), text(&out.stderr))
}

fn a_semaphore_admits_n_and_queues_the_next(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let limit = ["--limit", "2"];
    let (mut a, _) = hold(&store, "sem", &limit, &until(&go), dir.path(), "a");
    let (mut b, _) = hold(&store, "sem", &limit, &until(&go), dir.path(), "b");
    let (c, err) = code(&store, &["exec", "-n", "--limit", "2", "sem", "--", "true"]);
    assert_eq!(c, Some(75), "a third holder of a semaphore of 2: {err}");
    let st = status(&store, "sem");
    let holders = st["holders"].as_array().expect("holders listed").clone();
    assert_eq!(holders.len(), 2, "{st}");
    assert_eq!(st["sharing"], json!({"limit": 2}), "{st}");
    assert_eq!(
        st["owner"], holders[0]["owner"],
        "the first holder on top: {st}"
    );
    let tokens: Vec<u64> = holders
        .iter()
        .map(|h| h["fencing_token"].as_u64().unwrap())
        .collect();
    assert_ne!(tokens[0], tokens[1], "{st}");
    let text_status = text(
        &store
            .dlock()
            .args(["status", "sem"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(text_status.contains("sem (2 of 2)"), "{text_status}");
    // A third waits in line, and runs once the holders leave, with a newer token.
    let third = ["exec", "--limit", "2", "sem", "--timeout", "30s"];
    let third = waiting(
        &store,
        "sem",
        &[&third[..], &ECHO_TOKEN].concat(),
        dir.path(),
        "c",
    );
    if store.caps().queue {
        let st = status(&store, "sem");
        assert_eq!(st["waiters"][0]["sharing"], json!({"limit": 2}), "{st}");
        assert!(status_text(&store, "sem").contains("(--limit 2)"));
    }
    std::fs::write(&go, "").unwrap();
    for holder in [&mut a, &mut b] {
        let status = wait_exit(holder, Duration::from_secs(20)).expect("a holder hung");
        assert!(status.success(), "{status:?}");
    }
    let out = third.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let token: u64 = text(&out.stdout).parse().unwrap();
    assert!(token > tokens[0].max(tokens[1]), "{token} after {tokens:?}");
    assert!(!store.held("sem"));
}

fn callers_that_disagree_on_the_limit_are_refused(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let (mut a, _) = hold(
        &store,
        "sem",
        &["--limit", "2"],
        &until(&go),
        dir.path(),
        "a",
    );
    for other in [&["--limit", "3"][..], &[], &["--shared"]] {
        let mut args = vec!["exec", "-w", "5s", "sem"];
        args.extend(other);
        args.extend(["--", "true"]);
        let (c, err) = code(&store, &args);
        assert_eq!(c, Some(2), "{other:?} beside --limit 2: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("'sem'") && err.contains("semaphore of 2"),
            "{err}"
        );
    }
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut a, Duration::from_secs(20))
        .unwrap()
        .success());
    // An exclusive holder is not joined by a semaphore either.
    let go2 = dir.path().join("go2");
    let (mut x, _) = hold(&store, "sem", &[], &until(&go2), dir.path(), "x");
    let (c, err) = code(&store, &["exec", "-n", "--limit", "2", "sem", "--", "true"]);
    assert_eq!(c, Some(2), "{err}");
    assert!(err.contains("held exclusively"), "{err}");
    std::fs::write(&go2, "").unwrap();
    assert!(wait_exit(&mut x, Duration::from_secs(20))
        .unwrap()
        .success());
    // With no holder left, a new N may start.
    let (c, err) = code(&store, &["exec", "-n", "--limit", "3", "sem", "--", "true"]);
    assert_eq!(c, Some(0), "{err}");
}

fn readers_share_and_a_queued_writer_stops_later_readers(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let (mut r1, _) = hold(&store, "rw", &["-s"], &until(&go), dir.path(), "r1");
    let (mut r2, _) = hold(&store, "rw", &["--shared"], &until(&go), dir.path(), "r2");
    let st = status(&store, "rw");
    assert_eq!(st["sharing"], "shared", "{st}");
    assert_eq!(st["holders"].as_array().map(Vec::len), Some(2), "{st}");
    let (c, err) = code(&store, &["exec", "-n", "rw", "--", "true"]);
    assert_eq!(c, Some(75), "a writer beside readers: {err}");
    let wrote = dir.path().join("wrote");
    let wrote_s = wrote.to_str().unwrap();
    let args = ["exec", "rw", "--timeout", "30s", "--", "touch", wrote_s];
    let writer = waiting(&store, "rw", &args, dir.path(), "w");
    if store.caps().queue {
        let st = status(&store, "rw");
        assert_eq!(st["waiters"][0].get("sharing"), None, "a writer: {st}");
    }
    // A reader arriving after the queued writer does not overtake it (where waiters
    // queue: elsewhere readers may starve a writer, as docs/commands.md says).
    if store.caps().queue {
        let (c, err) = code(&store, &["exec", "-n", "-s", "rw", "--", "true"]);
        assert_eq!(c, Some(75), "a reader overtook a queued writer: {err}");
    }
    assert!(!wrote.exists(), "the writer ran beside readers");
    std::fs::write(&go, "").unwrap();
    for r in [&mut r1, &mut r2] {
        assert!(wait_exit(r, Duration::from_secs(20)).unwrap().success());
    }
    let out = writer.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(wrote.exists());
}

fn a_killed_holder_frees_its_slot(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let ttl = format!("{}ms", 1500 * store.slowdown(Duration::from_millis(1500)));
    let flags = ["--limit", "2", "--ttl", &ttl];
    let (mut a, a_cmd) = hold(&store, "sem", &flags, &until(&go), dir.path(), "a");
    let (mut b, _) = hold(&store, "sem", &flags, &until(&go), dir.path(), "b");
    send_signal(a.id(), "KILL");
    send_signal(a_cmd, "KILL");
    let _ = a.wait();
    // The slot comes back (at once on the local store, at the TTL elsewhere), and only one.
    let (c, err) = code(
        &store,
        &["exec", "-w", "30s", "--limit", "2", "sem", "--", "true"],
    );
    assert_eq!(c, Some(0), "{err}");
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut b, Duration::from_secs(20))
        .unwrap()
        .success());
}

fn status_lists_each_waiter_with_the_sharing_it_asks_for(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let (mut x, _) = hold(&store, "asks", &[], &until(&go), dir.path(), "x");
    let args = ["exec", "-s", "asks", "--timeout", "30s", "--", "true"];
    let reader = waiting(&store, "asks", &args, dir.path(), "r");
    let st = status(&store, "asks");
    if store.caps().queue {
        assert_eq!(st["waiters"][0]["sharing"], "shared", "{st}");
        let shown = status_text(&store, "asks");
        let line = shown.lines().find(|l| l.contains("waiter 1:"));
        assert!(line.is_some_and(|l| l.ends_with("(--shared)")), "{shown}");
    } else {
        assert!(st["waiters"].is_null(), "no queue to list: {st}");
    }
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut x, Duration::from_secs(20))
        .unwrap()
        .success());
    let out = reader.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The local store only (elsewhere a stopped waiter leaves the line when its lease runs out):
/// a waiter stopped (`^Z`) at the head of a semaphore's queue keeps a free slot from the
/// next caller for a second at most, and waits on when it resumes.
#[test]
fn a_stopped_waiter_of_a_local_semaphore_does_not_hold_up_the_queue() {
    let store = Store::local();
    let dir = tempfile::tempdir().unwrap();
    let go = |tag: &str| dir.path().join(format!("go-{tag}"));
    let limit = ["--limit", "2"];
    let (mut a, _) = hold(&store, "sem", &limit, &until(&go("a")), dir.path(), "a");
    let (mut b, _) = hold(&store, "sem", &limit, &until(&go("b")), dir.path(), "b");
    let ran = dir.path().join("ran");
    let script = format!("touch '{}'", ran.display());
    let args = ["exec", "--limit", "2", "sem", "--", "sh", "-c", &script];
    let stopped = waiting(&store, "sem", &args, dir.path(), "s");
    send_signal(stopped.id(), "STOP");
    std::fs::write(go("a"), "").unwrap();
    assert!(wait_exit(&mut a, Duration::from_secs(20))
        .unwrap()
        .success());
    let freed = Instant::now();
    // At first, an arrival does not overtake the waiter the free slot is for...
    let (c, err) = code(&store, &["exec", "-n", "--limit", "2", "sem", "--", "true"]);
    let late = freed.elapsed();
    assert!(
        late < Duration::from_millis(800),
        "the arrival took {late:?}: too late to tell whether it overtook the waiter"
    );
    assert_eq!(c, Some(75), "overtook a waiter at once: {err}");
    // ...but once the slot has stayed free for a second, the next caller takes it.
    let flags = ["--limit", "2", "-w", "15s"];
    let (mut c, _) = hold(&store, "sem", &flags, &until(&go("c")), dir.path(), "c");
    let took = freed.elapsed();
    assert!(took < Duration::from_secs(5), "held up for {took:?}");
    assert!(!ran.exists(), "the stopped waiter ran");
    // Resumed, it finds both slots taken, waits on in its place, and runs after them.
    send_signal(stopped.id(), "CONT");
    assert_eq!(waiters(&store, "sem"), 1);
    for (tag, holder) in [("b", &mut b), ("c", &mut c)] {
        std::fs::write(go(tag), "").unwrap();
        let status = wait_exit(holder, Duration::from_secs(20)).expect("a holder hung");
        assert!(status.success(), "{status:?}");
    }
    let out = stopped.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(ran.exists());
}

/// Lists the markers in `$IN` whose process is alive: a marker is `ROLE` then the pid of the
/// command that made it, and a holder killed outright leaves its marker behind.
const LIVE: &str = r#"live() { for f in "$IN"/*; do [ -e "$f" ] || continue; m=${f##*/}; s=$(cut -d' ' -f3 "/proc/${m#?}/stat" 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ] && echo "$m"; done; }"#;

/// Runs one shell loop per `(role, flags)` of `rounds` `dlock exec -q FLAGS sem` each, each
/// run `script` with `$ROLE`, `$IN` (a directory shared by the runs, where each marks itself
/// `$ROLE$$` while inside) and `$OUT` (a file for what they saw; a failed run writes
/// `FAILED` and its exit code). Meanwhile SIGKILLs `kills` random holders (dlock and its
/// command at once: the lease is left to expire). Returns what the runs saw and how many
/// holders were killed.
fn contend(
    store: &Store,
    dir: &Path,
    loops: &[(&str, &str)],
    rounds: u32,
    script: &str,
    kills: usize,
) -> (String, usize) {
    let (inside, out) = (dir.join("in"), dir.join("out"));
    std::fs::create_dir(&inside).unwrap();
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("err"))
        .unwrap();
    let mut children = Vec::new();
    for (role, flags) in loops {
        let run = format!(
            "for i in $(seq {rounds}); do '{}' exec -q -w 120s {flags} sem -- sh -c \"$SCRIPT\" \
             || echo FAILED $? >> \"$OUT\"; done",
            dlock_bin().display(),
        );
        let mut sh: Command = store.shell(&run);
        sh.stderr(err.try_clone().unwrap())
            .env("SCRIPT", format!("{LIVE}\n{script}"))
            .env("IN", &inside)
            .env("OUT", &out)
            .env("ROLE", role);
        children.push(sh.spawn().unwrap());
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let killed = std::thread::scope(|s| {
        let killer = s.spawn(|| kill_holders(&inside, kills, &done));
        for c in &mut children {
            assert!(
                wait_exit(c, Duration::from_secs(240)).is_some(),
                "a loop hung"
            );
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        killer.join().unwrap()
    });
    assert!(killed > 0, "no holder was killed");
    let err = std::fs::read_to_string(dir.join("err")).unwrap();
    let seen = std::fs::read_to_string(out).unwrap();
    (format!("{seen}--- the loops' stderr:\n{err}"), killed)
}

/// SIGKILLs up to `kills` holders found marked in `inside`, one every few hundred
/// milliseconds, until `done`: the command and its parent `dlock exec` together, then
/// removes the marker (so that a later process given the same pid is not counted).
fn kill_holders(inside: &Path, kills: usize, done: &std::sync::atomic::AtomicBool) -> usize {
    let mut killed = 0;
    let mut seed = std::process::id() as usize;
    while killed < kills && !done.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(150));
        let marks: Vec<_> = std::fs::read_dir(inside)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        if marks.is_empty() {
            continue;
        }
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mark = &marks[(seed >> 33) % marks.len()];
        let Ok(cmd) = mark[1..].parse::<u32>() else {
            continue;
        };
        let parent = std::fs::read_to_string(format!("/proc/{cmd}/stat"))
            .ok()
            .and_then(|st| st.split(' ').nth(3).and_then(|p| p.parse::<u32>().ok()));
        let Some(parent) = parent else { continue };
        let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).unwrap_or_default();
        if comm.trim() != "dlock" {
            continue; // the run ended between the two reads
        }
        // dlock first: a command killed first would be an ordinary end, its lease released.
        if !kill9(parent) {
            continue;
        }
        kill9(cmd);
        wait_for(Duration::from_secs(5), || {
            std::fs::read_to_string(format!("/proc/{cmd}/stat"))
                .map_or(true, |st| st.split(' ').nth(2) == Some("Z"))
        });
        let _ = std::fs::remove_file(inside.join(mark));
        killed += 1;
    }
    killed
}

/// SIGKILL to `pid`; false when it had already gone.
fn kill9(pid: u32) -> bool {
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The runs' `FAILED` lines are all holders killed by [`contend`] (exit 137), at most
/// `killed` of them.
fn only_killed_runs_failed(seen: &str, killed: usize) {
    let failed: Vec<&str> = seen.lines().filter(|l| l.starts_with("FAILED")).collect();
    assert!(
        failed.iter().all(|l| *l == "FAILED 137") && failed.len() <= killed,
        "{killed} killed: {seen}"
    );
}

/// A killed holder's slot comes back at its TTL: short, so that the loops move on, and long
/// enough that a loaded machine renews in time (a semaphore on a quorum renews on every
/// server).
fn short_ttl(store: &Store) -> String {
    format!("{}ms", 3000 * store.slowdown(Duration::from_millis(3000)))
}

fn contending_semaphore_loops_never_exceed_the_limit(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"touch "$IN/$ROLE$$"; echo "n $(live | wc -l) $DLOCK_FENCING_TOKEN" >> "$OUT"; sleep 0.05; rm "$IN/$ROLE$$""#;
    let flags = format!("--limit 3 --ttl {}", short_ttl(&store));
    let (seen, killed) = contend(
        &store,
        dir.path(),
        &[("s", flags.as_str()); 8],
        5,
        script,
        3,
    );
    only_killed_runs_failed(&seen, killed);
    let runs: Vec<(usize, u64)> = seen
        .lines()
        .filter(|l| l.starts_with("n "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    assert!(runs.len() + killed >= 40, "{killed} killed: {seen}");
    assert!(
        runs.iter().all(|(n, _)| (1..=3).contains(n)),
        "more than 3 at once: {seen}"
    );
    let mut tokens: Vec<u64> = runs.iter().map(|r| r.1).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), runs.len(), "a token handed out twice: {seen}");
}

/// Readers mark themselves `r`, writers `w`, in a shared directory, and look at who else is
/// inside: a writer must be alone, a reader must see no writer.
fn contending_readers_and_writers_never_overlap(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"touch "$IN/$ROLE$$"
if [ "$ROLE" = w ]; then [ "$(live | wc -l)" -eq 1 ] || echo BAD writer beside $(live) >> "$OUT"
else live | grep -q '^w' && echo BAD reader beside $(live) >> "$OUT"; fi
echo ran >> "$OUT"; sleep 0.02; rm "$IN/$ROLE$$""#;
    let ttl = short_ttl(&store);
    let (reader, writer) = (format!("-s --ttl {ttl}"), format!("--ttl {ttl}"));
    let mut loops = vec![("r", reader.as_str()); 5];
    loops.extend([("w", writer.as_str()); 3]);
    let (seen, killed) = contend(&store, dir.path(), &loops, 5, script, 3);
    assert!(!seen.contains("BAD"), "{seen}");
    only_killed_runs_failed(&seen, killed);
    let ran = seen.lines().filter(|l| *l == "ran").count();
    assert!(ran + killed >= 40, "{killed} killed: {seen}");
}
