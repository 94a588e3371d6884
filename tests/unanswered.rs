//! A store that does not answer: a signal still ends the wait at once (exit 130, nothing
//! left held), and the waiting line says the server is not answering instead of pretending
//! to wait for a holder.

use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::support::{self, send_signal, wait_exit, RedisServer, Silent, Store};

/// Well under the 3 s request timeout, and far above what a cancel takes (its clean-up is
/// bounded by a few hundred milliseconds), so that a loaded machine does not fail it.
const PROMPT: Duration = Duration::from_millis(1500);

/// Spawns `dlock` with stderr piped, and a channel of its stderr lines.
fn spawn(mut dlock: Command) -> (Child, Receiver<String>) {
    let mut child = dlock
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = support::lines_of(child.stderr.take().unwrap());
    (child, rx)
}

fn exec(url: &str, key: &str) -> Command {
    let mut c = support::dlock();
    c.env("DLOCK_URL", url).args(["exec", key, "--", "true"]);
    c
}

/// The next stderr line, within `limit`.
fn next_line(lines: &Receiver<String>, limit: Duration) -> String {
    lines
        .recv_timeout(limit)
        .expect("dlock said nothing on stderr")
}

/// Sends SIGINT and asserts that dlock exits 130 within [`PROMPT`].
fn interrupt_promptly(dlock: &mut Child) {
    interrupt_within(dlock, PROMPT);
}

/// Sends SIGINT and asserts that dlock exits 130 within `limit`.
fn interrupt_within(dlock: &mut Child, limit: Duration) {
    let sent = Instant::now();
    send_signal(dlock.id(), "INT");
    let status = wait_exit(dlock, Duration::from_secs(10)).expect("dlock must end");
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(took < limit, "SIGINT took {took:?} to end dlock");
}

#[test]
fn sigint_ends_an_acquire_hanging_on_a_silent_server_at_once() {
    let silent = Silent::start();
    let (mut dlock, lines) = spawn(exec(&silent.url(), "k"));
    // The line comes once the request has hung for a while: dlock is acquiring by then
    // (without a password, connecting sends nothing and needs no answer).
    next_line(&lines, Duration::from_secs(5));
    interrupt_promptly(&mut dlock);
}

#[test]
fn sigint_ends_a_connection_hanging_on_a_silent_server_at_once() {
    let silent = Silent::start();
    // With a password, connecting waits for the server's answer to AUTH.
    let url = format!("redis://:s3cret@127.0.0.1:{}", silent.port);
    let (mut dlock, lines) = spawn(exec(&url, "k"));
    assert!(support::wait_for(Duration::from_secs(5), || silent
        .accepted()
        > 0));
    interrupt_promptly(&mut dlock);
    let said: Vec<String> = lines.try_iter().collect();
    assert!(!said.concat().contains("s3cret"), "{said:?}");
}

#[test]
fn sigint_on_a_paused_server_leaves_nothing_held_once_it_resumes() {
    let mut store = Store::redis();
    // Load the scripts first: on a fresh server the acquire would only get NOSCRIPT.
    let warm = store.dlock().args(["exec", "warm", "--", "true"]).status();
    assert_eq!(warm.unwrap().code(), Some(0));
    let url = store.server().url();
    store.server().pause();
    let (mut dlock, lines) = spawn(exec(&url, "k"));
    next_line(&lines, Duration::from_secs(5)); // the acquire is sent, and unanswered
    interrupt_promptly(&mut dlock);
    store.server().resume();
    // The server now runs what was sent before dlock ended: the acquire (which grants)
    // and, behind it on the same connection, the leave that gives the grant back.
    let server = store.server();
    let granted = support::wait_for(Duration::from_secs(5), || {
        server.cli(&["GET", "dlock:{k}:fence"]) == "1"
    });
    assert!(granted, "the acquire reached the server");
    assert_eq!(server.cli(&["EXISTS", "dlock:{k}:lease"]), "0", "left held");
    assert_eq!(
        server.cli(&["ZCARD", "dlock:{k}:queue"]),
        "0",
        "left queued"
    );
}

#[test]
fn sigint_ends_a_redlock_wait_with_a_silent_member_at_once() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let silent = Silent::start();
    let urls = format!("{},{},{}", servers[0].url(), servers[1].url(), silent.url());
    let lock = support::dlock()
        .env("DLOCK_URL", &urls)
        .args(["lock", "k", "--ttl", "1m"])
        .output()
        .unwrap();
    assert!(lock.status.success(), "{lock:?}");
    let owner = String::from_utf8_lossy(&lock.stdout).trim().to_string();

    let before = silent.accepted();
    let (mut dlock, _lines) = spawn(exec(&urls, "k"));
    // Its connection, then the subscription it waits on, which goes to the lead server
    // (the smallest URL): the silent member, or one of the others.
    let subscribed = |s: &RedisServer| !s.cli(&["PUBSUB", "CHANNELS", "*"]).is_empty();
    assert!(support::wait_for(Duration::from_secs(5), || {
        silent.accepted() >= before + 2
            || (silent.accepted() > before && servers.iter().any(subscribed))
    }));
    // Subscribing waits up to 1 s for each server: the signal must not wait for that.
    interrupt_within(&mut dlock, Duration::from_millis(900));

    // The holder is untouched, and once it lets go the key is free at once.
    for server in &servers {
        assert_eq!(server.cli(&["HGET", "dlock:{k}:lease", "owner"]), owner);
    }
    let unlock = support::dlock()
        .env("DLOCK_URL", &urls)
        .args(["unlock", "k", "--owner", &owner])
        .status();
    assert_eq!(unlock.unwrap().code(), Some(0));
    let status = support::dlock()
        .env("DLOCK_URL", &urls)
        .args(["exec", "-n", "k", "--", "true"])
        .status();
    assert_eq!(status.unwrap().code(), Some(0));
}

#[test]
fn the_waiting_line_says_the_server_does_not_answer() {
    let silent = Silent::start();
    let url = silent.url();
    let (mut dlock, lines) = spawn(exec(&url, "k"));
    let line = next_line(&lines, Duration::from_secs(5));
    assert!(
        line.starts_with(&format!("dlock: no answer from {url} for ")),
        "{line}"
    );
    assert!(line.contains("acquiring 'k'"), "{line}");
    assert!(!line.contains("waiting for"), "nobody holds it: {line}");
    interrupt_promptly(&mut dlock);

    // While connecting, too.
    let with_password = format!("redis://:s3cret@127.0.0.1:{}", silent.port);
    let (mut dlock, lines) = spawn(exec(&with_password, "k"));
    let line = next_line(&lines, Duration::from_secs(5));
    assert!(
        line.contains("no answer from redis://***@127.0.0.1:"),
        "{line}"
    );
    assert!(line.contains("connecting"), "{line}");
    interrupt_promptly(&mut dlock);
}

#[test]
fn the_waiting_line_says_no_majority_answers() {
    let silent = [Silent::start(), Silent::start()];
    let server = RedisServer::start();
    let urls = format!("{},{},{}", server.url(), silent[0].url(), silent[1].url());
    let mut cmd = support::dlock();
    cmd.env("DLOCK_URL", &urls)
        .args(["exec", "k", "--timeout", "4s", "--", "true"]);
    let (mut dlock, lines) = spawn(cmd);
    let line = next_line(&lines, Duration::from_secs(5));
    assert!(line.starts_with("dlock: no answer from "), "{line}");
    assert!(line.contains("'k'"), "{line}");
    // Without a majority dlock gives up at its deadline (69: the servers, not a holder,
    // kept it from the lock); it never claims a wait meanwhile.
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock must end");
    assert_eq!(status.code(), Some(69));
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(!rest.iter().any(|l| l.contains("waiting for")), "{rest:?}");
}
