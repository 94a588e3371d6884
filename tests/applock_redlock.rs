//! `?layout=plain` on every server of a Redlock quorum against node `redlock` 4 on the
//! same three servers (the helpers are `applock_redis.rs`'s): either side holding K makes
//! the other wait, in both orders; eight mixed loops never overlap; the fencing counters
//! beside K are aligned across the servers; an application holding K on a minority does
//! not block a majority; what the layout cannot carry is refused in one line.

use crate::applock_redis::{
    eight_mixed_loops, plain_on, second_waits_for_first, status_json, Peer,
};
use crate::support::{self, dlock, RedisServer};

fn three() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

#[test]
fn dlock_waits_for_node_redlock_on_three_servers() {
    second_waits_for_first(&three(), Some(Peer::Node), None);
}

#[test]
fn node_redlock_waits_for_dlock_on_three_servers() {
    second_waits_for_first(&three(), None, Some(Peer::Node));
}

#[test]
fn eight_mixed_loops_on_three_servers_never_overlap() {
    eight_mixed_loops(&urls(&three()), [Peer::Node, Peer::Node]);
}

/// A server whose counter is ahead (it saw acquisitions the others missed) sets the
/// token; every server's counter and holder hash then carry it, and K holds the owner
/// alone on each.
#[test]
fn the_fencing_counters_are_aligned_across_the_quorum() {
    let servers = three();
    let fence = "dlock:plain:{jobs}:jobs:fence";
    servers[1].cli(&["SET", fence, "10"]);
    let out = plain_on(&urls(&servers))
        .args(["lock", "jobs", "--ttl", "20s", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lease["fencing_token"].as_u64(), Some(11), "{lease}");
    let owner = lease["owner"].as_str().unwrap();
    for s in &servers {
        assert_eq!(s.cli(&["GET", "jobs"]), owner);
        assert_eq!(s.cli(&["GET", fence]), "11");
        assert_eq!(
            s.cli(&["HGET", "dlock:plain:{jobs}:jobs:meta", "token"]),
            "11"
        );
    }
    let st = status_json(&urls(&servers), "jobs");
    assert_eq!(st["fencing_token"].as_u64(), Some(11), "{st}");
    let unlock = plain_on(&urls(&servers))
        .args(["unlock", "jobs", "--owner", owner])
        .output();
    assert!(unlock.unwrap().status.success());
    for s in &servers {
        assert_eq!(s.cli(&["EXISTS", "jobs"]), "0");
    }
}

/// Redlock's rule, for applications too: K held on one server of three leaves a majority
/// to take, and that server's value is never touched.
#[test]
fn an_application_key_on_a_minority_does_not_block_the_majority() {
    let servers = three();
    servers[0].cli(&["SET", "app:lock", "someone-else", "PX", "30000"]);
    let token = support::token_of(plain_on(&urls(&servers)).args(["exec", "-n", "app:lock"]));
    assert_eq!(token, 1);
    assert_eq!(servers[0].cli(&["GET", "app:lock"]), "someone-else");
    for s in &servers[1..] {
        assert_eq!(s.cli(&["EXISTS", "app:lock"]), "0");
    }
    // On two of three it is the application's: refused at once.
    servers[1].cli(&["SET", "app:lock", "someone-else", "PX", "30000"]);
    let out = plain_on(&urls(&servers))
        .args(["exec", "-n", "app:lock", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
}

#[test]
fn what_the_quorum_cannot_carry_is_refused_in_one_line() {
    let servers = three();
    let url = urls(&servers);
    for extra in [&["--shared"][..], &["--limit", "2"], &["--priority", "3"]] {
        let out = plain_on(&url)
            .args(["exec", "app:lock"])
            .args(extra)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {out:?}");
        let err = support::text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("app:lock") && err.contains("layout=plain"),
            "{err}"
        );
    }
    let mixed = dlock()
        .args(["-u", &format!("{}?layout=plain", servers[0].url())])
        .args(["-u", &servers[1].url(), "-u", &servers[2].url()])
        .args(["exec", "app:lock", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(mixed.status.code(), Some(2), "{mixed:?}");
    let err = support::text(&mixed.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("layout"), "{err}");
    for s in &servers {
        assert_eq!(s.cli(&["DBSIZE"]), "0", "nothing written");
    }
}
