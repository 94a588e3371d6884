//! The etcd client against a real etcd: the calls the lock recipe is built from, a grant
//! sent again, and the words of an error etcd answers for a key.

use std::time::Duration;

use crate::support::{dlock, EtcdServer};
use dlock::backend::etcd::client::{prefix_end, Client};
use dlock::backend::etcd::proto::*;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn client(server: &EtcdServer) -> Client {
    Client::connect(&[server.endpoint()], &server.url(), None)
        .await
        .unwrap()
}

fn put(key: &str, value: &str, lease: i64) -> PutRequest {
    PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        ..Default::default()
    }
}

fn get(key: &str) -> RangeRequest {
    RangeRequest {
        key: key.into(),
        ..Default::default()
    }
}

#[test]
fn put_range_and_txn_compare() {
    let server = EtcdServer::start();
    rt().block_on(async {
        let c = client(&server).await;
        let p = c.put(put("a/1", "one", 0)).await.unwrap();
        c.put(put("a/2", "two", 0)).await.unwrap();
        c.put(put("b", "other", 0)).await.unwrap();
        let all = c
            .range(RangeRequest {
                key: b"a/".to_vec(),
                range_end: prefix_end(b"a/"),
                ..Default::default()
            })
            .await
            .unwrap();
        let keys: Vec<&[u8]> = all.kvs.iter().map(|kv| kv.key.as_slice()).collect();
        assert_eq!(keys, [b"a/1".as_slice(), b"a/2"]);
        let rev = p.header.unwrap().revision;
        assert_eq!(all.kvs[0].create_revision, rev);
        // etcdctl sees what we wrote.
        assert_eq!(server.ctl(&["get", "--print-value-only", "a/1"]), "one");

        // Create-if-absent, as the lock recipe does it.
        let absent = |key: &str| Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: key.into(),
            target_union: Some(TargetUnion::CreateRevision(0)),
            range_end: Vec::new(),
        };
        let op = |r| RequestOp { request: Some(r) };
        let txn = |key: &str| TxnRequest {
            compare: vec![absent(key)],
            success: vec![op(Request::Put(put(key, "new", 0)))],
            failure: vec![op(Request::Range(get(key)))],
        };
        let taken = c.txn(txn("a/1")).await.unwrap();
        assert!(!taken.succeeded);
        match &taken.responses[0].response {
            Some(Response::Range(r)) => assert_eq!(r.kvs[0].value, b"one"),
            other => panic!("{other:?}"),
        }
        let created = c.txn(txn("a/3")).await.unwrap();
        assert!(created.succeeded);
        assert!(matches!(
            created.responses[0].response,
            Some(Response::Put(_))
        ));
        assert_eq!(server.ctl(&["get", "--print-value-only", "a/3"]), "new");
    });
}

#[test]
fn lease_grant_keep_alive_and_revoke() {
    let server = EtcdServer::start();
    rt().block_on(async {
        let c = client(&server).await;
        let lease = c.grant(5).await.unwrap();
        assert_eq!(lease.ttl, 5);
        c.put(put("leased", "x", lease.id)).await.unwrap();
        let ttl = c.time_to_live(lease.id).await.unwrap();
        assert!((1..=5).contains(&ttl.ttl), "{ttl:?}");
        assert_eq!(ttl.granted_ttl, 5);

        let mut ka = c.keep_alive();
        assert_eq!(ka.once(lease.id).await.unwrap(), 5);
        // The stream serves several renewals.
        assert_eq!(ka.once(lease.id).await.unwrap(), 5);

        c.revoke(lease.id).await.unwrap();
        let gone = c.range(get("leased")).await.unwrap();
        assert!(gone.kvs.is_empty(), "revoking deletes the lease's keys");
        // A keep-alive of a revoked lease answers TTL 0; revoking again is no error.
        assert_eq!(ka.once(lease.id).await.unwrap(), 0);
        c.revoke(lease.id).await.unwrap();
        assert!(c.time_to_live(lease.id).await.unwrap().ttl <= 0);
    });
}

#[test]
fn a_watch_sees_a_delete() {
    let server = EtcdServer::start();
    rt().block_on(async {
        let c = client(&server).await;
        let rev = c
            .put(put("w", "x", 0))
            .await
            .unwrap()
            .header
            .unwrap()
            .revision;
        let mut watch = c.watch_stream();
        watch.create(b"w", rev + 1).await.unwrap();
        server.ctl(&["del", "w"]);
        let seen = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let resp = watch.next().await.unwrap();
                if let Some(e) = resp.events.first() {
                    return e.clone();
                }
            }
        })
        .await
        .expect("the delete was not seen");
        assert_eq!(seen.r#type, EventType::Delete as i32);
        assert_eq!(seen.kv.unwrap().key, b"w");
    });
}

#[test]
fn a_dead_endpoint_is_unavailable() {
    let mut server = EtcdServer::start();
    let endpoint = server.endpoint();
    server.kill();
    let e = rt()
        .block_on(Client::connect(&[endpoint], "etcd://x", None))
        .err()
        .expect("connected to a dead endpoint");
    assert!(e.to_string().contains("etcd://x: cannot connect"), "{e}");
    assert_eq!(e.exit_code(), dlock::exit::UNAVAILABLE);
}

/// A grant sent again after its answer was lost finds its lease id taken: the lease is
/// ours, granted, and its TTL is the one granted.
#[test]
fn a_grant_sent_again_counts_as_granted() {
    let server = EtcdServer::start();
    rt().block_on(async {
        let c = client(&server).await;
        let first = c.grant_id(7, 0x5eed).await.unwrap();
        let again = c.grant_id(7, 0x5eed).await.unwrap();
        assert_eq!((again.id, again.ttl), (first.id, 7));
        // Revoking it twice: there once, then gone.
        assert!(c.revoke_found(0x5eed).await.unwrap());
        assert!(!c.revoke_found(0x5eed).await.unwrap());
    });
}

/// etcd refuses a user the lock's keys: every command that works on the key says which
/// key and which cluster, in one line, exit 69, without the password.
#[test]
fn an_error_etcd_answers_for_a_key_names_the_key() {
    let server = EtcdServer::start();
    server.ctl(&["user", "add", "root:rootpw"]);
    server.ctl(&["user", "add", "u:upw"]);
    server.ctl(&["role", "add", "r"]);
    server.ctl(&[
        "role",
        "grant-permission",
        "r",
        "--prefix=true",
        "readwrite",
        "ok/",
    ]);
    server.ctl(&["user", "grant-role", "u", "r"]);
    server.ctl(&["auth", "enable"]);
    let url = format!("etcd://u:upw@{}", server.endpoint());
    let commands: [&[&str]; 4] = [
        &["exec", "job", "--", "true"],
        &["status", "job"],
        &["unlock", "job", "--force"],
        &["lock", "job"],
    ];
    for args in commands {
        let out = dlock().env("DLOCK_URL", &url).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        assert_eq!(
            code,
            Some(i32::from(dlock::exit::UNAVAILABLE)),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("lock 'job'"), "{args:?}: {err}");
        assert!(err.contains(&server.endpoint()), "{args:?}: {err}");
        assert!(err.contains("permission denied"), "{args:?}: {err}");
        assert!(!err.contains("upw"), "{args:?}: {err}");
    }
}
