//! Real servers for the tests, each on a free loopback port with its own directory, so tests
//! run in parallel safely. The bench uses this module too (through `#[path]`).

use std::net::TcpListener;

mod etcd;
mod redis;
mod silent;
mod tls;

#[allow(unused_imports)] // the bench uses Redis only
pub use etcd::{EtcdCluster, EtcdServer};
pub use redis::RedisServer;
pub use silent::Silent;
pub use tls::{pki, self_signed};

/// A port that was free a moment ago (the kernel picks it; we release it at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
