//! dlock and Apache Curator's `InterProcessMutex` contend for the same locks: neither runs
//! its command while the other holds the lock, in either order; and so do dlock's readers
//! (`--shared`) and the writer of Curator's `InterProcessReadWriteLock`. The Curator side is a
//! small Java program compiled here against Debian's `libcurator-recipes-java` with the
//! machine's JDK: when either is missing the tests fail (`.ci/install` installs them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{dlock, read_when_ready, wait_exit, wait_for, ZkServer};

/// The Curator jars; their manifests name guava, slf4j and the ZooKeeper client.
const CURATOR: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar";

/// Holds an `InterProcessMutex` on PATH (or, with a fourth argument `write` or `read`, that
/// side of an `InterProcessReadWriteLock`) while `sh -c SCRIPT` runs. With `protected`, it
/// prints the children of PATH instead, and exits 0 when there are some and Curator's
/// `ProtectedUtils` takes each for a protected node.
const PROGRAM: &str = r#"
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.imps.ProtectedUtils;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryNTimes;

public class CuratorLock {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], 10000, 5000, new RetryNTimes(3, 100));
        client.start();
        String side = args.length > 3 ? args[3] : "mutex";
        if (side.equals("protected")) {
            List<String> children = client.getChildren().forPath(args[1]);
            boolean all = !children.isEmpty();
            for (String child : children) {
                System.out.println(child);
                all &= ProtectedUtils.isProtectedZNode(child);
            }
            client.close();
            System.exit(all ? 0 : 1);
        }
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, args[1]);
        InterProcessLock mutex = side.equals("write") ? rw.writeLock()
                : side.equals("read") ? rw.readLock()
                : new InterProcessMutex(client, args[1]);
        if (!mutex.acquire(60, TimeUnit.SECONDS)) {
            System.exit(75);
        }
        int code;
        try {
            code = new ProcessBuilder("sh", "-c", args[2]).inheritIO().start().waitFor();
        } finally {
            mutex.release();
            client.close();
        }
        System.exit(code);
    }
}
"#;

/// Compiles the Curator program into `dir`, and returns its class path.
fn compile(dir: &Path) -> String {
    compile_java(dir, "CuratorLock", PROGRAM)
}

/// Compiles the Java class `class` (its source `source`) against the Curator jars into
/// `dir`, and returns the class path to run it with.
pub fn compile_java(dir: &Path, class: &str, source: &str) -> String {
    let file = dir.join(format!("{class}.java"));
    std::fs::write(&file, source).unwrap();
    let out = Command::new("javac")
        .args(["-cp", CURATOR, "-d"])
        .arg(dir)
        .arg(&file)
        .output()
        .expect("javac (apt-get install default-jdk-headless libcurator-recipes-java)");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("{}:{CURATOR}", dir.display())
}

/// A shell script that records its start, waits for `go`, records its end.
fn critical_section(dir: &Path, who: &str) -> String {
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
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `dlock exec` as `who`: `dlock` (exclusive) or `dlock-shared` (`--shared`).
fn dlock_exec(server: &ZkServer, dir: &Path, who: &str) -> Child {
    let mut c = dlock();
    c.env("DLOCK_URL", server.url())
        .args(["exec", "/locks/job"])
        .args((who == "dlock-shared").then_some("--shared"))
        .args(["--", "sh", "-c"])
        .arg(critical_section(dir, who));
    spawn(c)
}

/// The Curator program as `who`: `curator` (`InterProcessMutex`), `curator-writer` or
/// `curator-reader` (the write or read lock of `InterProcessReadWriteLock`).
fn curator_lock(server: &ZkServer, dir: &Path, classpath: &str, who: &str) -> Child {
    let mut c = Command::new("java");
    c.args(["-Xmx64m", "-cp", classpath, "CuratorLock"])
        .arg(server.endpoint())
        .arg("/locks/job")
        .arg(critical_section(dir, who))
        .args(match who {
            "curator-writer" => Some("write"),
            "curator-reader" => Some("read"),
            _ => None,
        });
    spawn(c)
}

/// `dlock status /locks/job --json`, parsed.
fn status(server: &ZkServer) -> serde_json::Value {
    let out = dlock()
        .env("DLOCK_URL", server.url())
        .args(["status", "/locks/job", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// How many contenders lock `/locks/job` has, as dlock's `status` sees them.
fn contenders(server: &ZkServer) -> usize {
    let st = status(server);
    let held = usize::from(st["held"] == true);
    held + st["waiters"].as_array().map_or(0, Vec::len)
}

fn stamp(dir: &Path, name: String) -> u128 {
    read_when_ready(&dir.join(name), Duration::from_secs(60))
        .parse()
        .unwrap()
}

/// `first` takes the lock, `second` queues behind it and must not start until `first`'s
/// command has ended.
fn one_waits_for_the_other(first: &str, second: &str) {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let classes = tempfile::tempdir().unwrap();
    let classpath = compile(classes.path());
    let start = |who: &str| -> Child {
        match who.strip_prefix("dlock") {
            Some(_) => dlock_exec(&server, dir.path(), who),
            None => curator_lock(&server, dir.path(), &classpath, who),
        }
    };
    let mut a = start(first);
    let started: PathBuf = dir.path().join(format!("{first}-start"));
    read_when_ready(&started, Duration::from_secs(60));
    let mut b = start(second);
    assert!(
        wait_for(Duration::from_secs(60), || contenders(&server) == 2),
        "{second} never queued"
    );
    let st = status(&server);
    let recipe = match first {
        "curator" => "(Curator InterProcessMutex)",
        "curator-writer" => "(Curator InterProcessReadWriteLock)",
        _ => "",
    };
    if !recipe.is_empty() {
        assert_eq!(st["command"].as_str().unwrap_or_default(), recipe, "{st}");
    }
    // Queued, it must not run while the first holds the lock.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !dir.path().join(format!("{second}-start")).exists(),
        "{second} ran while {first} held the lock"
    );
    std::fs::write(dir.path().join(format!("go-{first}")), "").unwrap();
    let end_a = stamp(dir.path(), format!("{first}-end"));
    std::fs::write(dir.path().join(format!("go-{second}")), "").unwrap();
    let start_b = stamp(dir.path(), format!("{second}-start"));
    assert!(start_b > end_a, "{second} started before {first} ended");
    for (who, child) in [(first, &mut a), (second, &mut b)] {
        let status = wait_exit(child, Duration::from_secs(30)).expect("exits");
        assert!(status.success(), "{who}: {status:?}");
    }
    assert!(wait_for(Duration::from_secs(5), || contenders(&server) == 0));
}

#[test]
fn curator_waits_for_dlock() {
    one_waits_for_the_other("dlock", "curator");
}

#[test]
fn dlock_waits_for_curator() {
    one_waits_for_the_other("curator", "dlock");
}

#[test]
fn a_curator_writer_waits_for_a_dlock_reader() {
    one_waits_for_the_other("dlock-shared", "curator-writer");
}

#[test]
fn a_dlock_reader_waits_for_a_curator_writer() {
    one_waits_for_the_other("curator-writer", "dlock-shared");
}

/// A Curator reader and dlock's readers hold the lock together; dlock's exclusive caller
/// does not join them.
#[test]
fn dlock_readers_share_with_a_curator_reader() {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let classes = tempfile::tempdir().unwrap();
    let classpath = compile(classes.path());
    let who = "curator-reader";
    let mut reader = curator_lock(&server, dir.path(), &classpath, who);
    read_when_ready(
        &dir.path().join(format!("{who}-start")),
        Duration::from_secs(60),
    );
    let run = |flags: &[&str]| {
        let out = dlock()
            .env("DLOCK_URL", server.url())
            .args(["exec", "-n", "/locks/job"])
            .args(flags)
            .args(["--", "true"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--shared"]);
    assert_eq!(
        code,
        Some(0),
        "a dlock reader beside a Curator reader: {err}"
    );
    let (code, err) = run(&[]);
    assert_eq!(
        code,
        Some(75),
        "a dlock writer beside a Curator reader: {err}"
    );
    let st = status(&server);
    assert_eq!(st["sharing"], "shared", "{st}");
    std::fs::write(dir.path().join(format!("go-{who}")), "").unwrap();
    let status = wait_exit(&mut reader, Duration::from_secs(30)).expect("exits");
    assert!(status.success(), "{status:?}");
}

/// dlock's contender nodes carry a protection id Curator recognises (`_c_<uuid>-…`), for
/// an exclusive holder and a shared waiter alike.
#[test]
fn curator_reads_dlock_nodes_as_protected() {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let classes = tempfile::tempdir().unwrap();
    let classpath = compile(classes.path());
    let mut holder = dlock_exec(&server, dir.path(), "dlock");
    read_when_ready(&dir.path().join("dlock-start"), Duration::from_secs(60));
    let mut reader = dlock_exec(&server, dir.path(), "dlock-shared");
    assert!(
        wait_for(Duration::from_secs(60), || contenders(&server) == 2),
        "the reader never queued"
    );
    let out = Command::new("java")
        .args(["-Xmx64m", "-cp", &classpath, "CuratorLock"])
        .args([&server.endpoint(), "/locks/job", "", "protected"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&out.stdout);
    assert_eq!(names.lines().count(), 2, "{out:?}");
    assert!(out.status.success(), "not protected for Curator: {names}");
    for who in ["dlock", "dlock-shared"] {
        std::fs::write(dir.path().join(format!("go-{who}")), "").unwrap();
    }
    for child in [&mut holder, &mut reader] {
        let status = wait_exit(child, Duration::from_secs(30)).expect("exits");
        assert!(status.success(), "{status:?}");
    }
}
