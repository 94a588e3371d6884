//! The harness itself: servers start on free ports, restart, and answer; and every test
//! file is part of the test binary.

use crate::support;

#[test]
fn redis_server_starts_and_restarts() {
    let mut s = support::RedisServer::start();
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

/// Cargo builds only `tests/tests.rs` (`autotests = false`): a file added beside it and not
/// declared there would never run, silently.
#[test]
fn every_test_file_is_declared_in_tests_rs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(dir.join("tests.rs")).unwrap();
    let declared: Vec<&str> = root
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let module = path.extension().is_some_and(|e| e == "rs") || path.join("mod.rs").exists();
        if module && name != "tests" && !declared.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "not declared in tests/tests.rs: {missing:?}"
    );
}
