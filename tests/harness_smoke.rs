//! The harness itself: servers start on free ports, restart, and answer.
mod common;

#[test]
fn redis_server_starts_and_restarts() {
    let mut s = common::RedisServer::start();
    assert_eq!(s.cli(&["PING"]), "PONG");
    s.cli(&["SET", "x", "1"]);
    s.restart();
    assert_eq!(
        s.cli(&["GET", "x"]),
        "",
        "no persistence: data is gone after restart"
    );
    assert_eq!(s.cli(&["PING"]), "PONG");
}
