//! What only the Memcached store can be asked: its time limits, its fencing counter when
//! memcached loses it (restart, eviction, a counter put back lower), and a server that
//! is gone or never answers. The conformance suite and the CLI matrix run on it too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::spec::BackendSpec;
use dlock::backend::{Backend, ReleaseMode, RunRecord};
use dlock::error::Error;

use crate::support::{
    self, alive, free_port, no_wait, req, stderr_of, wait_exit, MemcachedServer, Silent,
};

fn dlock(server: &MemcachedServer) -> std::process::Command {
    let mut c = support::dlock();
    c.env("DLOCK_URL", server.url());
    c
}

async fn open(server: &MemcachedServer) -> Arc<dyn Backend> {
    let spec = BackendSpec::from_urls(&[server.url()]).unwrap();
    dlock::backend::spec::open(&spec).await.unwrap()
}

/// The token `status KEY --json` shows.
fn token_of(server: &MemcachedServer, key: &str) -> Option<u64> {
    let out = dlock(server)
        .args(["status", key, "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["fencing_token"].as_u64()
}

#[test]
fn ttls_memcached_cannot_keep_are_exit_2_and_nothing_is_taken() {
    let server = MemcachedServer::start();
    for ttl in ["2s", "2999ms", "31d"] {
        let out = dlock(&server)
            .args(["exec", "job", "--ttl", ttl, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{ttl}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("'job'") && err.contains(&server.url()),
            "{err}"
        );
        let out = dlock(&server)
            .args(["lock", "job", "--ttl", ttl])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{ttl}: {out:?}");
    }
    let st = dlock(&server).args(["status", "job"]).status().unwrap();
    assert_eq!(st.code(), Some(1), "nothing was taken");
    // 30 days is the longest TTL memcached reads as relative: accepted.
    let out = dlock(&server)
        .args(["lock", "job", "--ttl", "30d"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ttl = server.ask("mg dlock:lock:job t", |_| true);
    let left: u64 = ttl[0].trim_start_matches("HD t").parse().unwrap();
    assert!(left > 29 * 24 * 3600 && left <= 30 * 24 * 3600, "{ttl:?}");
}

#[test]
fn unreachable_server_is_exit_69_in_one_line() {
    let url = format!("memcached://127.0.0.1:{}", free_port());
    let out = support::dlock()
        .args(["exec", "k", "-n", "-u", &url, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&url) && err.contains("'k'"), "{err}");
}

#[test]
fn a_server_that_never_answers_is_exit_69_after_the_request_timeout() {
    let silent = Silent::start();
    let url = format!("memcached://127.0.0.1:{}", silent.port);
    let t0 = Instant::now();
    let out = support::dlock()
        .args(["exec", "k", "-n", "-u", &url, "--", "true"])
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(8),
        "{took:?}"
    );
    // A notice that the server is slow may come first; the error is the last line.
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains(&url) && last.contains("'k'"), "{err}");
    assert!(last.contains("not answering"), "{err}");
    assert!(silent.accepted() >= 1);
}

/// A restart empties memcached: the holder's next renewal (every TTL/3) finds the lease
/// gone and kills its command (79). Another holder can take the key as soon as the server
/// is back; its token is still higher (the counter restarts from the clock).
#[test]
fn a_restart_loses_the_lease_and_tokens_still_increase() {
    let mut server = MemcachedServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, pid) = support::hold_with(
        dlock(&server),
        "r",
        &["--ttl", "3s"],
        "exec sleep 60",
        dir.path(),
    );
    let before = token_of(&server, "r").expect("held");
    server.restart();
    let restarted = Instant::now();
    let status = wait_exit(&mut holder, Duration::from_secs(10)).expect("dlock must give up");
    assert_eq!(status.code(), Some(79));
    assert!(!alive(pid), "the command must be dead");
    assert!(
        restarted.elapsed() < Duration::from_millis(1000 + 500),
        "found out at the next renewal: {:?}",
        restarted.elapsed()
    );
    assert!(stderr_of(holder).contains("lost the lease"));
    let out = dlock(&server)
        .args(["lock", "r", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["fencing_token"].as_u64().unwrap() > before, "{v}");
}

/// Without `-M`, memcached evicts the coldest items when its memory is full: a lease
/// nobody renews is among them. Its key is free again, and the next token still higher.
#[test]
fn eviction_under_memory_pressure_frees_the_key_and_tokens_still_increase() {
    let server = MemcachedServer::start_with(&["-m", "2"]);
    let out = dlock(&server)
        .args(["lock", "cold", "--ttl", "10m"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let before = token_of(&server, "cold").unwrap();
    // Junk of the lock item's size, so that it lands in the same slab class (memcached
    // evicts within a class); the item is read without bumping it in the LRU.
    let size = server.ask("mg dlock:lock:cold s u", |_| true);
    let size: usize = size[0].trim_start_matches("HD s").parse().unwrap();
    let junk = "x".repeat(size);
    let mut n = 0;
    let evicted = support::wait_for(Duration::from_secs(20), || {
        let mut batch = String::new();
        for _ in 0..2000 {
            n += 1;
            batch.push_str(&format!("ms junk{n:011} {size} T0 q\r\n{junk}\r\n"));
        }
        server.ask(&format!("{batch}mn"), |l| l == "MN");
        server.ask("mg dlock:lock:cold u", |_| true) == ["EN"]
    });
    assert!(evicted, "the lease was never evicted");
    let st = dlock(&server).args(["status", "cold"]).status().unwrap();
    assert_eq!(st.code(), Some(1), "free once evicted");
    let out = dlock(&server)
        .args(["lock", "cold", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["fencing_token"].as_u64().unwrap() > before, "{v}");
}

/// A counter evicted while its lock is held is put back above the holder's token by the
/// holder's next renewal.
#[tokio::test]
async fn a_counter_lost_while_held_is_recreated_above_the_token() {
    let server = MemcachedServer::start();
    let b = open(&server).await;
    let a = b.acquire(&req("k", "a"), &no_wait()).await.unwrap();
    assert_eq!(server.ask("md dlock:token:k", |_| true), ["HD"]);
    b.renew("k", "a", Duration::from_secs(10)).await.unwrap();
    let got = server.ask("mg dlock:token:k v", |l| !l.starts_with("VA"));
    let counter: u64 = got[1].parse().unwrap();
    assert!(counter >= a.lease.fencing_token, "{got:?}");
    b.release("k", "a", ReleaseMode::All).await.unwrap();
    let next = b.acquire(&req("k", "b"), &no_wait()).await.unwrap();
    assert!(next.lease.fencing_token > a.lease.fencing_token);
}

/// A counter that went back (lost and recreated lower) is refused: the key is not handed
/// out with a lower token than this process saw, and nothing is left held.
#[tokio::test]
async fn a_lower_token_is_refused() {
    let server = MemcachedServer::start();
    let b = open(&server).await;
    let a = b.acquire(&req("k", "a"), &no_wait()).await.unwrap();
    b.release("k", "a", ReleaseMode::All).await.unwrap();
    assert_eq!(server.ask("ms dlock:token:k 1 T0\r\n5", |_| true), ["HD"]);
    let e = support::refused(b.acquire(&req("k", "b"), &no_wait()).await);
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("'k'") && msg.contains("went back"), "{msg}");
    assert!(msg.contains(&a.lease.fencing_token.to_string()), "{msg}");
    let st = b.status(&["k".to_string()]).await.unwrap();
    assert!(st[0].lock.is_none(), "left held: {st:?}");
}

/// The last run and the last success are kept beside the lock, for at most 30 days.
#[tokio::test]
async fn run_records_are_kept_for_at_most_30_days() {
    let server = MemcachedServer::start();
    let b = open(&server).await;
    assert_eq!(b.last_runs("job").await.unwrap(), Default::default());
    let ok = RunRecord {
        owner: "a".into(),
        fencing_token: 7,
        exit_code: 0,
        ..RunRecord::default()
    };
    let failed = RunRecord {
        exit_code: 3,
        fencing_token: 8,
        ..ok.clone()
    };
    b.record_run("job", &ok).await.unwrap();
    b.record_run("job", &failed).await.unwrap();
    let runs = b.last_runs("job").await.unwrap();
    assert_eq!(runs.last, Some(failed));
    assert_eq!(runs.last_success, Some(ok));
    let ttl = server.ask("mg dlock:runs:job t", |_| true);
    let left: u64 = ttl[0].trim_start_matches("HD t").parse().unwrap();
    assert!(left > 0 && left <= 30 * 24 * 3600, "{ttl:?}");
}

/// A counter item that is not a number fails the acquire (69, CMD not run) and gives the
/// key back: the next caller is refused for the counter again, not held off for the TTL.
#[test]
fn a_counter_that_is_not_a_number_leaves_nothing_held() {
    let server = MemcachedServer::start();
    assert_eq!(
        server.ask("ms dlock:token:job 3 T0\r\nabc", |_| true),
        ["HD"]
    );
    let out = dlock(&server)
        .args(["exec", "job", "--", "echo", "ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(out.stdout.is_empty(), "the command ran: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("'job'") && err.contains(&server.url()),
        "{err}"
    );
    assert_eq!(
        server.ask("mg dlock:lock:job v", |_| true),
        ["EN"],
        "left held"
    );
    let st = dlock(&server).args(["status", "job"]).status().unwrap();
    assert_eq!(st.code(), Some(1), "status must say free");
    let again = dlock(&server)
        .args(["exec", "-n", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(69), "{again:?}");
}

/// Something else on the port (a MariaDB greeting, say) is one line of exit 69, its bytes
/// shown escaped.
#[test]
fn a_port_that_answers_garbage_is_one_escaped_line() {
    let garbage = Garbage::start(b"d\0\0\0\n5.5.5-10.11.6-MariaDB\0\x1b[31m");
    let url = format!("memcached://127.0.0.1:{}", garbage.port);
    for args in [&["exec", "k", "--", "true"][..], &["status", "k"]] {
        let out = support::dlock()
            .args(["-u", &url])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(69), "{args:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        crate::one_line::assert_clean(&err, "stderr");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(r"unexpected reply 'd\0\0\0'"), "{err}");
    }
}

/// A server on a free port that greets every connection with the same bytes and closes it.
struct Garbage {
    port: u16,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Garbage {
    fn start(greeting: &'static [u8]) -> Garbage {
        use std::io::Write;
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.write_all(greeting);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Garbage { port, stop }
    }
}

impl Drop for Garbage {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
