//! ZooKeeper ACLs: what one digest user's runs leave, another client (without
//! credentials) can read; nodes whose ACL hides their data or children (made by other
//! clients) still show as held, or are skipped with one warning event.

use std::process::{Output, Stdio};
use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode};

use crate::support::{dlock, read_when_ready, ZkServer};

fn run(url: &str, args: &[&str]) -> Output {
    dlock().env("DLOCK_URL", url).args(args).output().unwrap()
}

/// `dlock exec job` on `url` that writes `dir/start` and sleeps.
fn holder(url: &str, dir: &std::path::Path) -> std::process::Child {
    let start = dir.join("start");
    dlock()
        .env("DLOCK_URL", url)
        .args(["exec", "job", "--", "sh", "-c"])
        .arg(format!(
            "echo $DLOCK_FENCING_TOKEN > '{}'; sleep 30",
            start.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn token_of(dir: &std::path::Path) {
    read_when_ready(&dir.join("start"), Duration::from_secs(30));
}

/// A run of one digest user leaves nodes anyone may read: another client, without
/// credentials, lists the locks, sees the key held while it is, and reads its last run.
#[test]
fn another_user_sees_a_digest_users_locks_and_runs() {
    let server = ZkServer::start();
    let alice = format!("zk://alice:pw1@{}", server.endpoint());
    let anyone = server.url();
    let out = run(&alice, &["exec", "job", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    let listed = run(&anyone, &["status"]);
    assert!(listed.status.success(), "{listed:?}");
    assert!(listed.stderr.is_empty(), "{listed:?}");
    let named = run(&anyone, &["status", "--json", "job"]);
    assert_eq!(named.status.code(), Some(1), "{named:?}");
    assert!(named.stderr.is_empty(), "{named:?}");
    let st: serde_json::Value = serde_json::from_slice(&named.stdout).expect("JSON");
    assert_eq!(st["last_run"]["exit_code"], 0, "{st}");
    let dir = tempfile::tempdir().unwrap();
    let mut held = holder(&alice, dir.path());
    token_of(dir.path());
    let seen = run(&anyone, &["status", "--json", "job"]);
    assert_eq!(seen.status.code(), Some(0), "{seen:?}");
    let st: serde_json::Value = serde_json::from_slice(&seen.stdout).expect("JSON");
    assert!(st["held"] == true && st["owner"].is_string(), "{st}");
    let listed = run(&anyone, &["status"]);
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("job"),
        "{listed:?}"
    );
    let busy = run(&anyone, &["exec", "-n", "job", "--", "true"]);
    assert_ne!(busy.status.code(), Some(0), "{busy:?}");
    let _ = held.kill();
    let _ = held.wait();
}

/// Nodes another client made with an ACL of its own: a contender whose data only its
/// creator may read still holds the key for everyone (`status` shows it held, `exec -n`
/// is refused with 75, not 69), and a node nobody else may list is skipped by the listing
/// (one warning event, shown with `-v`).
#[test]
fn nodes_hidden_by_their_acl_still_count_or_are_skipped_with_a_warning() {
    let server = ZkServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let endpoint = server.endpoint();
    let _alice: Client = rt.block_on(async {
        let alice = Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .with_auth("digest", b"alice:pw1")
            .connect(&endpoint)
            .await
            .expect("connect");
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let own = CreateMode::EphemeralSequential.with_acls(Acls::creator_all());
        let secret = CreateMode::Persistent.with_acls(Acls::creator_all());
        alice.create("/job", b"", &open).await.expect("/job");
        let uuid = "0b6f1a2c-3d4e-4f50-8a9b-0c1d2e3f4a5b";
        let name = format!("/job/_c_{uuid}-lock-");
        alice.create(&name, b"{}", &own).await.expect("contender");
        alice
            .create("/secret", b"", &secret)
            .await
            .expect("/secret");
        alice
    });
    let anyone = server.url();
    let seen = run(&anyone, &["status", "--json", "job"]);
    assert_eq!(seen.status.code(), Some(0), "{seen:?}");
    let busy = run(&anyone, &["exec", "-n", "job", "--", "true"]);
    assert_eq!(busy.status.code(), Some(75), "{busy:?}");
    let listed = run(&anyone, &["status"]);
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("job"),
        "{listed:?}"
    );
    let verbose = run(&anyone, &["-v", "status"]);
    assert!(verbose.status.success(), "{verbose:?}");
    let said = String::from_utf8_lossy(&verbose.stderr);
    let skipped: Vec<&str> = said.lines().filter(|l| l.contains("/secret")).collect();
    assert_eq!(skipped.len(), 1, "{said}");
}
