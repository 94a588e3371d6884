//! `dlock elect` and `etcdctl elect` contend for one leadership (etcd's `concurrency.Election`
//! keeps `NAME/<lease hex>` keys, the lowest create revision leading, as `etcdctl lock`
//! does), in either order; `dlock leader` shows etcdctl's proposal, and `etcdctl elect -l`
//! shows dlock's leader with its value as it is (dlock's record of it is a sibling key).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{dlock, lines_of, send_signal, wait_exit, wait_for};
use crate::support::{EtcdServer, Reaped};

/// `dlock elect web --value VALUE -- sh -c SCRIPT` on `server`.
fn dlock_elect(server: &EtcdServer, value: &str, script: &str) -> Reaped {
    let mut c = dlock();
    c.env("DLOCK_URL", server.url())
        .args(["elect", "web", "--value", value, "--", "sh", "-c", script]);
    Reaped(
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `dlock leader web` on `server`: its stdout.
fn dlock_leader(server: &EtcdServer) -> String {
    let mut c = dlock();
    let out = c
        .env("DLOCK_URL", server.url())
        .args(["leader", "web"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `etcdctl elect web PROPOSAL`, its stdout piped (it prints the key and the proposal once
/// elected).
fn etcdctl_elect(server: &EtcdServer, proposal: &str) -> Reaped {
    let mut c: Command = server.etcdctl();
    c.args(["elect", "web", proposal]);
    Reaped(
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn candidates(server: &EtcdServer) -> usize {
    let keys = server.ctl(&["get", "web/", "--prefix", "--keys-only"]);
    keys.lines().filter(|l| !l.is_empty()).count()
}

/// How many of dlock's records of election candidates (`\0elect\0web\0<lease>`) etcd has.
fn records(server: &EtcdServer) -> usize {
    let keys = server.ctl(&["get", "", "--prefix", "--keys-only"]);
    keys.lines()
        .filter(|l| l.starts_with("\0elect\0web\0"))
        .count()
}

/// CMD: marks that it leads, then waits for `go`.
fn lead_until_go(dir: &Path) -> String {
    let d = dir.display();
    format!("touch '{d}/leads'; while [ ! -e '{d}/go' ]; do sleep 0.01; done")
}

#[test]
fn etcdctl_elect_waits_for_a_dlock_leader_and_sees_its_value() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut leader = dlock_elect(&server, "primary-A", &lead_until_go(dir.path()));
    assert!(wait_for(Duration::from_secs(10), || dir
        .path()
        .join("leads")
        .exists()));
    // `elect -l` prints the leader's key and value, then follows it until stopped.
    let mut listen = server.etcdctl();
    listen.args(["elect", "-l", "web"]).stdout(Stdio::piped());
    let mut listen = Reaped(
        listen
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let listed = lines_of(listen.0.stdout.take().unwrap());
    let _key = listed
        .recv_timeout(Duration::from_secs(10))
        .expect("elect -l: a key");
    let value = listed
        .recv_timeout(Duration::from_secs(5))
        .expect("elect -l: a value");
    assert_eq!(
        value, "primary-A",
        "etcdctl elect -l prints the bare proclamation"
    );
    drop(listen);
    let mut ctl = etcdctl_elect(&server, "proposal-B");
    let said = lines_of(ctl.0.stdout.take().unwrap());
    assert!(wait_for(Duration::from_secs(10), || candidates(&server) == 2));
    assert!(
        said.try_recv().is_err(),
        "etcdctl elected while dlock leads"
    );
    let shown = dlock_leader(&server);
    assert!(
        shown.starts_with("primary-A (host "),
        "dlock's record: {shown}"
    );
    assert_eq!(records(&server), 1, "dlock's record of its candidate");
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert!(wait_exit(&mut leader.0, Duration::from_secs(10))
        .unwrap()
        .success());
    let key = said
        .recv_timeout(Duration::from_secs(10))
        .expect("etcdctl elected");
    assert!(key.starts_with("web/"), "{key}");
    assert_eq!(
        said.recv_timeout(Duration::from_secs(5)).unwrap(),
        "proposal-B"
    );
    assert!(
        dlock_leader(&server).starts_with("proposal-B ("),
        "dlock leader sees it"
    );
    assert_eq!(records(&server), 0, "released with its key");
    send_signal(ctl.id(), "INT");
}

#[test]
fn dlock_elect_waits_for_an_etcdctl_leader() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut ctl = etcdctl_elect(&server, "proposal-A");
    let said = lines_of(ctl.0.stdout.take().unwrap());
    said.recv_timeout(Duration::from_secs(10))
        .expect("etcdctl elected");
    let mut ours = dlock_elect(&server, "second", &lead_until_go(dir.path()));
    assert!(wait_for(Duration::from_secs(10), || candidates(&server) == 2));
    assert!(
        !dir.path().join("leads").exists(),
        "dlock leads beside etcdctl"
    );
    assert!(dlock_leader(&server).starts_with("proposal-A ("));
    send_signal(ctl.id(), "INT"); // etcdctl resigns: it revokes its lease
    let _ = wait_exit(&mut ctl.0, Duration::from_secs(10));
    assert!(wait_for(Duration::from_secs(10), || dir
        .path()
        .join("leads")
        .exists()));
    assert!(dlock_leader(&server).starts_with("second ("));
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert!(wait_exit(&mut ours.0, Duration::from_secs(10))
        .unwrap()
        .success());
}
