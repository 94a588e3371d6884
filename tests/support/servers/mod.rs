//! Real servers for the tests, each on a free loopback port with its own directory, so tests
//! run in parallel safely. The bench uses this module too (through `#[path]`).

use std::net::TcpListener;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

mod etcd;
mod memcached;
mod mysql;
mod postgres;
mod redis;
mod redis_cluster;
mod silent;
mod tls;
mod zookeeper;

#[allow(unused_imports)] // the bench uses Redis only
pub use etcd::{EtcdCluster, EtcdServer};
#[allow(unused_imports)] // the bench uses it without `ask`
pub use memcached::MemcachedServer;
#[allow(unused_imports)] // the bench uses the server only
pub use mysql::{MysqlServer, MY_DB, MY_PASSWORD, MY_USER};
#[allow(unused_imports)] // the bench uses the server only
pub use postgres::{pg_bin, PostgresServer, PG_PASSWORD, PG_USER};
pub use redis::RedisServer;
#[allow(unused_imports)] // the bench uses a Cluster in its own rows only
pub use redis_cluster::{RedisCluster, Secured};
#[allow(unused_imports)] // the tests of network stores use it; the local store has none
pub use silent::Silent;
#[allow(unused_imports)] // a build without the ZooKeeper store has no test that names it
pub use tls::{pki, self_signed, Pki};
#[allow(unused_imports)] // the bench uses the standalone server only
pub use zookeeper::{ZkEnsemble, ZkServer, ZOOKEEPER_JAR};

/// What a fault test does to a store's server, the same way on every kind of server, so
/// that a fault is written once for every store (`tests/faults.rs`).
pub trait Server {
    /// The URL a client gives to reach it.
    fn url(&self) -> String;
    /// SIGKILL, as a crash: what the server keeps on disk stays, the rest is lost.
    fn kill(&mut self);
    /// SIGSTOP: connections stay open but nothing answers.
    fn pause(&self);
    /// SIGCONT after [`Server::pause`].
    fn resume(&self);
    /// Kills it (if it runs) and starts it again on the same ports with what it kept.
    fn restart(&mut self);
}

/// [`Server`] by each server's own methods of the same names.
macro_rules! server_by_its_methods {
    ($($server:ty),*) => {$(
        impl Server for $server {
            fn url(&self) -> String {
                <$server>::url(self)
            }
            fn kill(&mut self) {
                <$server>::kill(self)
            }
            fn pause(&self) {
                <$server>::pause(self)
            }
            fn resume(&self) {
                <$server>::resume(self)
            }
            fn restart(&mut self) {
                <$server>::restart(self)
            }
        }
    )*};
}

server_by_its_methods!(
    RedisServer,
    EtcdServer,
    ZkServer,
    PostgresServer,
    MysqlServer,
    MemcachedServer
);

/// Sends `sig` to a server's process, if it runs (pause and resume of one-process servers).
fn signal(child: &Option<Child>, sig: nix::sys::signal::Signal) {
    if let Some(child) = child {
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, sig);
    }
}

/// A port that was free a moment ago (the kernel picks it; we release it at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Asks `check` every `pause` until it answers, for at most `limit` (then `None`): the
/// start-up and restart loops of every server.
fn poll<T>(limit: Duration, pause: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(answer) = check() {
            return Some(answer);
        }
        std::thread::sleep(pause);
    }
    None
}

/// True, and the process forgotten, when a server's process has exited (on start-up: its
/// port was taken).
fn exited(child: &mut Option<Child>) -> bool {
    let gone = matches!(child.as_mut().map(Child::try_wait), Some(Ok(Some(_))));
    if gone {
        *child = None;
    }
    gone
}

/// Kills a server's process (SIGKILL), if it runs, and reaps it; what it wrote stays.
fn kill(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The last `n` lines of a server's log, newest first, for a failure message.
fn log_tail(log: &Path, n: usize) -> String {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = log.lines().rev().take(n).collect();
    lines.join("\n")
}
