//! What `-v`, `-vv` and `--log-format json` tell about a run, on every backend.

use std::time::Duration;

use crate::support::{self, Store};

on_every_backend!(
    verbose_tells_the_story_of_a_run,
    json_events_are_one_object_per_line,
    a_wait_is_an_event,
    the_metrics_file_records_each_run,
);

fn stderr_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(String::from)
        .collect()
}

/// The index of the first line containing `what`, after `from`.
fn find(lines: &[String], what: &str, from: usize) -> usize {
    let at = lines[from..].iter().position(|l| l.contains(what));
    from + at.unwrap_or_else(|| panic!("no line with {what:?} after line {from}: {lines:#?}"))
}

fn verbose_tells_the_story_of_a_run(store: Store) {
    let quiet = store
        .dlock()
        .args(["exec", "ev", "--", "true"])
        .output()
        .unwrap();
    assert!(
        quiet.status.success() && quiet.stderr.is_empty(),
        "{quiet:?}"
    );
    let k = store.slowdown(Duration::from_millis(300));
    let (ttl, sleep) = (format!("{}ms", 300 * k), format!("{}", 0.4 * f64::from(k)));
    let out = store
        .dlock()
        .args(["-vv", "exec", "ev", "--ttl", &ttl, "--", "sleep", &sleep])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lines = stderr_lines(&out);
    assert!(
        lines.iter().all(|l| l.starts_with("dlock: [")),
        "{lines:#?}"
    );
    let at = find(&lines, "connected to ", 0);
    let at = find(&lines, "acquired 'ev': token ", at);
    let at = find(&lines, "renewed 'ev' (", at);
    let at = find(&lines, "the command under 'ev' exited with 0 after ", at);
    find(&lines, "released 'ev'", at);
    // -v alone leaves the renewals out.
    let out = store
        .dlock()
        .args(["exec", "-v", "ev", "--ttl", &ttl, "--", "sleep", &sleep])
        .output()
        .unwrap();
    let lines = stderr_lines(&out);
    assert!(!lines.iter().any(|l| l.contains("renewed")), "{lines:#?}");
    find(&lines, "released 'ev'", 0);
}

fn json_events_are_one_object_per_line(store: Store) {
    let out = store
        .dlock()
        .env("DLOCK_LOG_FORMAT", "json")
        .args(["exec", "ev", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let events: Vec<serde_json::Value> = stderr_lines(&out)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["connected", "acquired", "exited", "released"]);
    assert_eq!(events[1]["key"], "ev");
    assert!(events[1]["token"].as_u64().unwrap() >= 1);
    assert_eq!(events[2]["code"], 3);
    for e in &events {
        assert!(e["ts"].as_str().unwrap().ends_with('Z'), "{e}");
        assert!(e["elapsed_ms"].as_f64().is_some(), "{e}");
    }
}

fn a_wait_is_an_event(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (mut holder, _) = support::hold_with(store.dlock(), "ev", &[], "sleep 60", dir.path());
    let out = store
        .dlock()
        .args(["-v", "exec", "ev", "--timeout", "1s", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let lines = stderr_lines(&out);
    let at = find(&lines, "waiting for 'ev': held by ", 0);
    find(&lines, "gave up after 1s", at);
    let _ = holder.kill();
    let _ = support::wait_exit(&mut holder, Duration::from_secs(5));
}

/// The samples of a metrics file, by name, parsed as node_exporter would.
fn metrics(path: &std::path::Path) -> std::collections::HashMap<String, f64> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid text format");
    scrape
        .samples
        .into_iter()
        .map(|s| {
            assert_eq!(s.labels.get("key"), Some("met"), "{s:?}");
            let v = match s.value {
                prometheus_parse::Value::Gauge(v) => v,
                other => panic!("not a gauge: {other:?}"),
            };
            (s.metric, v)
        })
        .collect()
}

fn the_metrics_file_records_each_run(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("met.prom");
    let run = |extra: &[&str], script: &str| {
        let mut c = store.dlock();
        c.args(["exec", "met", "--metrics-file"])
            .arg(&file)
            .args(extra);
        c.args(["--", "sh", "-c", script]).output().unwrap()
    };
    assert!(run(&[], "sleep 0.2").status.success());
    let ok = metrics(&file);
    assert_eq!(ok["dlock_last_exit_code"], 0.0);
    assert_eq!(ok["dlock_last_lease_lost"], 0.0);
    assert!(ok["dlock_last_duration_seconds"] >= 0.2, "{ok:?}");
    let success = ok["dlock_last_success_timestamp_seconds"];
    assert_eq!(success, ok["dlock_last_end_timestamp_seconds"]);
    assert_eq!(run(&[], "exit 3").status.code(), Some(3));
    let failed = metrics(&file);
    assert_eq!(failed["dlock_last_exit_code"], 3.0);
    assert_eq!(
        failed["dlock_last_success_timestamp_seconds"], success,
        "kept"
    );
    assert!(failed["dlock_last_start_timestamp_seconds"] >= ok["dlock_last_end_timestamp_seconds"]);
    // A lease taken away (unlock --force) ends the run with 79 and lease_lost 1.
    let force = format!(
        "sleep 0.2; '{}' unlock met --force 2>/dev/null; sleep 5",
        support::dlock_bin().display()
    );
    let ttl = format!("{}ms", 300 * store.slowdown(Duration::from_millis(300)));
    let out = run(&["--ttl", &ttl, "-q"], &force);
    assert_eq!(out.status.code(), Some(79), "{out:?}");
    let lost = metrics(&file);
    assert_eq!(lost["dlock_last_lease_lost"], 1.0);
    assert_eq!(lost["dlock_last_exit_code"], 79.0);
    // DLOCK_METRICS_DIR: one file per key.
    let out = store
        .dlock()
        .env("DLOCK_METRICS_DIR", dir.path())
        .args(["exec", "met", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        metrics(&dir.path().join("dlock_met.prom"))["dlock_last_exit_code"],
        0.0
    );
}
