//! `dlock elect` and Apache Curator's `LeaderSelector` (which campaigns with an
//! `InterProcessMutex` on its leader path) contend for one leadership on the same path, in
//! either order; `dlock leader` shows a Curator leader by its participant id. The Curator
//! side is compiled as `zookeeper_interop` compiles its program.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{dlock, read_when_ready, wait_exit, wait_for, ZkServer};
use crate::zookeeper_interop::compile_java;

/// The election's path, for both sides.
const PATH: &str = "/elect/sched";

/// Campaigns with a `LeaderSelector` (participant id ARGS[3]) on PATH; once leading, runs
/// `sh -c SCRIPT`, relinquishes when it ends, and exits with its code.
const PROGRAM: &str = r#"
import java.util.concurrent.CountDownLatch;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.retry.RetryNTimes;

public class CuratorLeader {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], 10000, 5000, new RetryNTimes(3, 100));
        client.start();
        CountDownLatch done = new CountDownLatch(1);
        int[] code = {0};
        LeaderSelector selector = new LeaderSelector(client, args[1],
                new LeaderSelectorListenerAdapter() {
                    @Override
                    public void takeLeadership(CuratorFramework c) throws Exception {
                        try {
                            code[0] = new ProcessBuilder("sh", "-c", args[2])
                                    .inheritIO().start().waitFor();
                        } finally {
                            done.countDown();
                        }
                    }
                });
        selector.setId(args[3]);
        selector.start();
        done.await();
        selector.close();
        client.close();
        System.exit(code[0]);
    }
}
"#;

/// A shell script that records its start, waits for `go-WHO`, records its end.
fn term(dir: &Path, who: &str) -> String {
    let d = dir.display();
    format!(
        "date +%s%N > '{d}/{who}-start'; \
         while [ ! -e '{d}/go-{who}' ]; do sleep 0.01; done; \
         date +%s%N > '{d}/{who}-end'"
    )
}

fn spawn(mut c: Command) -> Child {
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// `dlock elect PATH --value dlock-A -- sh -c TERM`.
fn dlock_elect(server: &ZkServer, dir: &Path) -> Child {
    let mut c = dlock();
    c.env("DLOCK_URL", server.url())
        .args(["elect", PATH, "--value", "dlock-A", "--", "sh", "-c"])
        .arg(term(dir, "dlock"));
    spawn(c)
}

/// The Curator program, participant id `curator-A`.
fn curator_elect(server: &ZkServer, dir: &Path, classpath: &str) -> Child {
    let mut c = Command::new("java");
    c.args(["-Xmx64m", "-cp", classpath, "CuratorLeader"])
        .arg(server.endpoint())
        .arg(PATH)
        .arg(term(dir, "curator"))
        .arg("curator-A");
    spawn(c)
}

/// `dlock leader PATH` (with `extra`): its exit code and stdout.
fn leader(server: &ZkServer, extra: &[&str]) -> (Option<i32>, String) {
    let out = dlock()
        .env("DLOCK_URL", server.url())
        .args(extra)
        .args(["leader", PATH])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.code(), text)
}

/// How many candidates the election has, as `dlock status` sees them.
fn candidates(server: &ZkServer) -> usize {
    let out = dlock()
        .env("DLOCK_URL", server.url())
        .args(["status", PATH, "--json"])
        .output()
        .unwrap();
    let st: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    usize::from(st["held"] == true) + st["waiters"].as_array().map_or(0, Vec::len)
}

fn stamp(dir: &Path, name: &str) -> u128 {
    read_when_ready(&dir.join(name), Duration::from_secs(60))
        .parse()
        .unwrap()
}

/// `first` leads, `second` campaigns behind it and must not start its term until
/// `first`'s has ended; `dlock leader` names the leader all along.
fn one_leads_then_the_other(first: &str, second: &str) {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let classes = tempfile::tempdir().unwrap();
    let classpath = compile_java(classes.path(), "CuratorLeader", PROGRAM);
    let start = |who: &str| match who {
        "dlock" => dlock_elect(&server, dir.path()),
        _ => curator_elect(&server, dir.path(), &classpath),
    };
    let mut a = start(first);
    stamp(dir.path(), &format!("{first}-start"));
    let mut b = start(second);
    assert!(
        wait_for(Duration::from_secs(60), || candidates(&server) == 2),
        "{second} never campaigned"
    );
    let (code, line) = leader(&server, &[]);
    assert_eq!(code, Some(0), "{line}");
    assert!(line.starts_with(&format!("{first}-A ")), "leader: {line}");
    let (_, json) = leader(&server, &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["leader"], true, "{json}");
    // Campaigning, it must not lead while the first does.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !dir.path().join(format!("{second}-start")).exists(),
        "{second} led while {first} did"
    );
    std::fs::write(dir.path().join(format!("go-{first}")), "").unwrap();
    let end_a = stamp(dir.path(), &format!("{first}-end"));
    let start_b = stamp(dir.path(), &format!("{second}-start"));
    assert!(start_b > end_a, "{second} led before {first}'s term ended");
    let (_, line) = leader(&server, &[]);
    assert!(line.starts_with(&format!("{second}-A ")), "leader: {line}");
    std::fs::write(dir.path().join(format!("go-{second}")), "").unwrap();
    for (who, child) in [(first, &mut a), (second, &mut b)] {
        let status = wait_exit(child, Duration::from_secs(30)).expect("exits");
        assert!(status.success(), "{who}: {status:?}");
    }
    assert!(wait_for(Duration::from_secs(10), || candidates(&server) == 0));
    assert_eq!(leader(&server, &[]), (Some(3), "none".to_string()));
}

#[test]
fn dlock_elect_waits_for_a_curator_leader() {
    one_leads_then_the_other("curator", "dlock");
}

#[test]
fn a_curator_leader_selector_waits_for_dlock_elect() {
    one_leads_then_the_other("dlock", "curator");
}
