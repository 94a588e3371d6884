//! `--shared` and `--limit N` on Redis (issue 19), what the CLI matrix cannot see: the
//! group keys, a holder's place freed at its TTL, wake-ups chained from one admitted
//! reader to the next, and contending loops counted from inside.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{self, dlock, forever, no_wait, refused, req, req_ttl, within, RedisServer};
use dlock::backend::redis::RedisBackend;
use dlock::backend::{AcquireRequest, Acquired, Backend, ReleaseMode, Sharing};
use dlock::error::Error;

async fn connect(server: &RedisServer) -> Arc<RedisBackend> {
    Arc::new(RedisBackend::connect(&server.url()).await.expect("connect"))
}

fn as_(sharing: Sharing, key: &str, owner: &str) -> AcquireRequest {
    AcquireRequest {
        sharing,
        ..req(key, owner)
    }
}

fn queue_len(server: &RedisServer, key: &str) -> usize {
    let zcard = server.cli(&["ZCARD", &format!("dlock:{{{key}}}:queue")]);
    zcard.parse().unwrap()
}

/// Polls `cond` until it holds or `limit` passes.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

#[tokio::test]
async fn a_semaphore_admits_n_each_with_its_token_and_refuses_another_n() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let mut tokens = Vec::new();
    for owner in ["a", "b", "c"] {
        let got = b
            .acquire(&as_(Sharing::Limit(3), "s", owner), &no_wait())
            .await;
        tokens.push(got.expect("a free place").lease.fencing_token);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let full = refused(
        b.acquire(&as_(Sharing::Limit(3), "s", "d"), &no_wait())
            .await,
    );
    assert!(matches!(full, Error::NotObtained(_)), "{full}");
    for other in [Sharing::Limit(4), Sharing::Exclusive, Sharing::Shared] {
        let e = refused(b.acquire(&as_(other, "s", "e"), &forever()).await);
        assert_eq!(e.exit_code(), 2, "{other:?}: {e}");
        assert!(e.to_string().contains("semaphore of 3"), "{e}");
    }
    assert_eq!(queue_len(&server, "s"), 0, "a conflict never queues");

    let status = b.status(&["s".into()]).await.unwrap().remove(0);
    assert_eq!(status.sharing, Sharing::Limit(3));
    let owners: Vec<_> = status.holders.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(owners, ["a", "b", "c"], "in the order they were granted");
    assert_eq!(status.lock.as_ref().map(|l| l.owner.as_str()), Some("a"));
    let listed = b.status(&[]).await.unwrap();
    assert_eq!(listed.len(), 1, "status with no key lists the semaphore");
    assert_eq!(listed[0].holders.len(), 3);

    // Each holder renews and releases its own place only.
    let renewed = b.renew("s", "b", Duration::from_secs(60)).await.unwrap();
    assert_eq!(renewed.fencing_token, tokens[1]);
    b.release("s", "b", ReleaseMode::One).await.unwrap();
    let gone = b.release("s", "b", ReleaseMode::One).await.unwrap_err();
    assert!(
        matches!(&gone, Error::NotOwner(m) if m.contains("gone")),
        "{gone}"
    );
    let d = b
        .acquire(&as_(Sharing::Limit(3), "s", "d"), &no_wait())
        .await;
    assert!(d.unwrap().lease.fencing_token > tokens[2]);

    // A forced release frees every holder, and the keys go.
    b.release("s", "x", ReleaseMode::Force).await.unwrap();
    assert_eq!(
        server.cli(&["EXISTS", "dlock:{s}:group", "dlock:{s}:ends"]),
        "0"
    );
    let status = b.status(&["s".into()]).await.unwrap().remove(0);
    assert!(status.lock.is_none() && status.holders.is_empty());
}

#[tokio::test]
async fn a_nested_run_of_a_reader_reenters_its_place_whatever_it_asks() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let outer = b.acquire(&as_(Sharing::Shared, "r", "o"), &no_wait()).await;
    let token = outer.unwrap().lease.fencing_token;
    let nested = AcquireRequest {
        reenter: vec!["o".into()],
        ..req("r", "o2")
    };
    let inner = b.acquire(&nested, &no_wait()).await.expect("re-entered");
    assert!(inner.lease.reentered);
    assert_eq!(
        (inner.lease.owner.as_str(), inner.lease.fencing_token),
        ("o", token)
    );
    let released = b.release("r", "o", ReleaseMode::One).await.unwrap();
    assert!(released.still_held, "one level only");
    let writer = refused(b.acquire(&req("r", "w"), &no_wait()).await);
    assert!(matches!(writer, Error::NotObtained(_)), "{writer}");
    b.release("r", "o", ReleaseMode::One).await.unwrap();
    b.acquire(&req("r", "w"), &no_wait())
        .await
        .expect("the reader left");
}

#[tokio::test]
async fn a_holder_that_dies_frees_its_place_at_its_ttl() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let short = AcquireRequest {
        sharing: Sharing::Limit(2),
        ..req_ttl("t", "dies", Duration::from_millis(800))
    };
    let died_at = Instant::now();
    drop(b.acquire(&short, &no_wait()).await.unwrap()); // never released
    b.acquire(&as_(Sharing::Limit(2), "t", "lives"), &no_wait())
        .await
        .unwrap();
    let third = as_(Sharing::Limit(2), "t", "third");
    assert!(
        b.acquire(&third, &no_wait()).await.is_err(),
        "both places taken"
    );
    b.acquire(&third, &within(Duration::from_secs(10)))
        .await
        .expect("the dead holder's place");
    let waited = died_at.elapsed();
    assert!(waited >= Duration::from_millis(790), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    let status = b.status(&["t".into()]).await.unwrap().remove(0);
    let owners: Vec<_> = status.holders.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(owners, ["lives", "third"]);
}

/// Starts a waiting acquisition of `req` that records when it was granted.
fn wait_in_line(
    b: &Arc<RedisBackend>,
    req: AcquireRequest,
) -> tokio::task::JoinHandle<(Acquired, Instant)> {
    let b = b.clone();
    tokio::spawn(async move {
        let got = b.acquire(&req, &forever()).await.expect("granted");
        (got, Instant::now())
    })
}

#[tokio::test]
async fn a_queued_writer_stops_later_readers_who_then_enter_together() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    b.acquire(&as_(Sharing::Shared, "rw", "r1"), &no_wait())
        .await
        .unwrap();
    let writer = wait_in_line(&b, req("rw", "w"));
    assert!(eventually(Duration::from_secs(5), || queue_len(&server, "rw") == 1).await);
    let late = refused(
        b.acquire(&as_(Sharing::Shared, "rw", "r2"), &no_wait())
            .await,
    );
    assert!(
        matches!(late, Error::NotObtained(_)),
        "a writer is queued: {late}"
    );
    let readers = [
        wait_in_line(&b, as_(Sharing::Shared, "rw", "r2")),
        wait_in_line(&b, as_(Sharing::Shared, "rw", "r3")),
        wait_in_line(&b, as_(Sharing::Shared, "rw", "r4")),
    ];
    assert!(eventually(Duration::from_secs(5), || queue_len(&server, "rw") == 4).await);

    b.release("rw", "r1", ReleaseMode::One).await.unwrap();
    let (w, _) = writer.await.unwrap();
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "no reader beside the writer"
    );
    let released_at = Instant::now();
    b.release("rw", &w.lease.owner, ReleaseMode::One)
        .await
        .unwrap();
    let mut tokens = vec![w.lease.fencing_token];
    for reader in readers {
        let (got, at) = reader.await.unwrap();
        // Woken one after another by each admission, well within one heartbeat (1 s).
        let after = at.duration_since(released_at);
        assert!(after < Duration::from_millis(500), "{after:?}");
        tokens.push(got.lease.fencing_token);
    }
    tokens[1..].sort();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let status = b.status(&["rw".into()]).await.unwrap().remove(0);
    assert_eq!((status.sharing, status.holders.len()), (Sharing::Shared, 3));
}

#[tokio::test]
async fn dlock_wait_is_woken_when_the_last_reader_leaves() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    for owner in ["r1", "r2"] {
        let got = b
            .acquire(&as_(Sharing::Shared, "wk", owner), &no_wait())
            .await;
        got.unwrap();
    }
    let mut waiter = support::Reaped(
        dlock()
            .args(["-u", &server.url(), "wait", "wk", "--timeout", "20s"])
            .spawn()
            .unwrap(),
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            server.cli(&["EXISTS", "dlock:{wk}:unfair"]) == "1"
        })
        .await
    );
    b.release("wk", "r1", ReleaseMode::One).await.unwrap();
    assert!(waiter.0.try_wait().unwrap().is_none(), "one reader is left");
    let released_at = Instant::now();
    b.release("wk", "r2", ReleaseMode::One).await.unwrap();
    let status = support::wait_exit(&mut waiter.0, Duration::from_secs(5)).expect("woken");
    assert!(status.success());
    assert!(released_at.elapsed() < Duration::from_secs(2));
}

/// 8 loops contend for a semaphore of 3; one in four holders is killed (never
/// releases, its place ends at its TTL). Never more than 3 at once, and every grant has
/// a token of its own from the one counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_loops_on_a_semaphore_of_three() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let loops = (0..8).map(|i| {
        let (b, inside, most, tokens) = (b.clone(), inside.clone(), most.clone(), tokens.clone());
        tokio::spawn(async move {
            for round in 0..6 {
                let owner = format!("l{i}-{round}");
                let killed = (i + round) % 4 == 0;
                let ttl = Duration::from_millis(if killed { 300 } else { 10_000 });
                let r = AcquireRequest {
                    sharing: Sharing::Limit(3),
                    ..req_ttl("sem", &owner, ttl)
                };
                let got = b.acquire(&r, &forever()).await.expect("granted");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokens.lock().unwrap().push(got.lease.fencing_token);
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                if killed {
                    // Out of our count at once, but its place is held until its TTL:
                    // the server may admit fewer, never more.
                    continue;
                }
                b.release("sem", &owner, ReleaseMode::One).await.unwrap();
            }
        })
    });
    for handle in loops.collect::<Vec<_>>() {
        handle.await.unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 3, "{most:?}");
    let mut tokens = tokens.lock().unwrap().clone();
    tokens.sort();
    let n = tokens.len() as u64;
    tokens.dedup();
    assert_eq!(tokens.len() as u64, n, "every grant has a token of its own");
    assert_eq!(
        tokens.last().copied(),
        Some(n),
        "one counter, raised once per grant"
    );
}

#[test]
fn a_holder_killed_with_sigkill_frees_its_place_at_its_ttl() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cmd = || {
        let mut c = dlock();
        c.env("DLOCK_URL", server.url());
        c
    };
    let extra = ["--limit", "2", "--ttl", "1s"];
    let (mut first, child) = support::hold_with(cmd(), "k9", &extra, "sleep 60", dir.path());
    let other_dir = tempfile::tempdir().unwrap(); // its own ready file
    let (other, _) = support::hold_with(cmd(), "k9", &extra, "sleep 60", other_dir.path());
    let _other = support::Reaped(other);
    first.kill().unwrap(); // SIGKILL: dlock never releases
    first.wait().unwrap();
    support::send_signal(child, "KILL");
    let killed_at = Instant::now();
    let full = cmd()
        .args(["exec", "--limit", "2", "--no-wait", "k9", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        full.status.code(),
        Some(75),
        "{}",
        support::text(&full.stderr)
    );
    let later = cmd()
        .args([
            "exec",
            "--limit",
            "2",
            "--timeout",
            "10s",
            "k9",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(later.status.success(), "{}", support::text(&later.stderr));
    let waited = killed_at.elapsed();
    assert!(
        waited < Duration::from_secs(4),
        "freed at its TTL: {waited:?}"
    );
}

#[tokio::test]
async fn status_shows_every_holder_in_text_and_json() {
    let server = RedisServer::start();
    let b = connect(&server).await;
    for owner in ["o1", "o2"] {
        let got = b
            .acquire(&as_(Sharing::Limit(2), "st", owner), &no_wait())
            .await;
        got.unwrap();
    }
    let status = |json: bool| {
        let mut c = dlock();
        c.args(["-u", &server.url(), "status", "st"]);
        if json {
            c.arg("--json");
        }
        support::text(&c.output().unwrap().stdout)
    };
    let text = status(false);
    let rows: Vec<_> = text.lines().filter(|l| l.starts_with("st ")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].contains("o1") && rows[1].contains("o2"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(
        json["owner"], "o1",
        "the first holder keeps the exclusive shape"
    );
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(json["holders"][1]["owner"], "o2");
    assert_eq!(json["sharing"], serde_json::json!({"limit": 2}));
}

/// On a Cluster the group keys share the lock's slot: the same scripts, and `status`
/// with no key finds the holders by one SCAN per master.
#[test]
fn a_semaphore_on_a_cluster() {
    let store = support::Store::redis_cluster();
    let run = |args: &[&str]| store.dlock().args(args).output().unwrap();
    for _ in 0..2 {
        let got = run(&["lock", "--limit", "2", "--no-wait", "cl"]);
        assert!(got.status.success(), "{}", support::text(&got.stderr));
    }
    let full = run(&["lock", "--limit", "2", "--no-wait", "cl"]);
    assert_eq!(
        full.status.code(),
        Some(75),
        "{}",
        support::text(&full.stderr)
    );
    let other = run(&["lock", "--shared", "--no-wait", "cl"]);
    assert_eq!(
        other.status.code(),
        Some(2),
        "{}",
        support::text(&other.stderr)
    );
    let listed = support::text(&run(&["status", "--json"]).stdout);
    let json: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(json["key"], "cl", "{listed}");
    assert_eq!(
        json["holders"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    let freed = run(&["unlock", "--force", "cl"]);
    assert!(freed.status.success(), "{}", support::text(&freed.stderr));
    let after = support::text(&run(&["status", "cl"]).stdout);
    assert!(after.contains("(free)"), "{after}");
}

/// The scripts' port of the admission rule (`admit` in `common.lua`) answers as
/// `Sharing::admit` does, case by case.
#[test]
fn the_lua_admission_rule_is_sharing_admit() {
    use dlock::backend::sharing::Admission;
    let server = RedisServer::start();
    let common = std::fs::read_to_string("src/backend/redis/common.lua").unwrap();
    let script = format!(
        "{common}\nlocal held = ARGV[2] ~= '' and ARGV[2] or nil\n\
         return admit(ARGV[1], held, tonumber(ARGV[3]), {{unpack(ARGV, 4)}})"
    );
    let code = |s: Sharing| match s {
        Sharing::Exclusive => "x".to_string(),
        Sharing::Shared => "s".to_string(),
        Sharing::Limit(n) => n.to_string(),
    };
    let modes = [
        Sharing::Exclusive,
        Sharing::Shared,
        Sharing::Limit(2),
        Sharing::Limit(3),
    ];
    let aheads: Vec<Vec<Sharing>> = vec![
        vec![],
        vec![Sharing::Exclusive],
        vec![Sharing::Shared, Sharing::Shared],
        vec![Sharing::Limit(2)],
        vec![Sharing::Shared, Sharing::Exclusive, Sharing::Limit(3)],
    ];
    let mut cases = 0;
    for me in modes {
        for held in std::iter::once(None).chain(modes.map(Some)) {
            for holders in [0u32, 1, 2, 5] {
                for ahead in &aheads {
                    let want = match me.admit(held, holders, ahead) {
                        Admission::Admit => "admit",
                        Admission::Wait => "wait",
                        Admission::Conflict(_) => "conflict",
                    };
                    let mut args = vec!["EVAL".to_string(), script.clone(), "0".into()];
                    args.push(code(me));
                    args.push(held.map(code).unwrap_or_default());
                    args.push(holders.to_string());
                    args.extend(ahead.iter().map(|w| code(*w)));
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let got = server.cli(&args);
                    assert_eq!(
                        got, want,
                        "{me:?} held {held:?} by {holders}, ahead {ahead:?}"
                    );
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 4 * 5 * 4 * 5);
}
