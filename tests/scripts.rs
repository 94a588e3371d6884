//! `lock`, `unlock`, `renew` and `status` through the real binary, on every backend.

use std::time::Duration;

use crate::support::{self, Store};
use serde_json::Value;

on_every_backend!(
    lock_prints_the_owner_and_unlock_takes_it,
    lock_json_has_the_documented_shape,
    export_sets_up_a_script_that_can_nest,
    wrong_owner_is_refused_and_changes_nothing,
    expired_lease_cannot_be_renewed_or_unlocked,
    force_releases_whoever_holds_it,
    renew_extends_the_lease,
    status_shows_holders_and_exits_1_when_free,
    status_json_has_the_documented_shape,
    lock_reenters_with_the_same_token,
);

fn run(store: &Store, args: &[&str]) -> (i32, String, String) {
    let out = store.dlock().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn run_as(store: &Store, owner: &str, args: &[&str]) -> i32 {
    store
        .dlock()
        .env("DLOCK_OWNER", owner)
        .args(args)
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

fn lock_prints_the_owner_and_unlock_takes_it(store: Store) {
    let (code, out, _) = run(&store, &["lock", "job", "--ttl", "1m"]);
    assert_eq!(code, 0);
    let owner = out.trim();
    assert_eq!(out.lines().count(), 1, "the owner id alone: {out:?}");
    assert_eq!(
        run(&store, &["lock", "job", "-n", "-q"]).0,
        75,
        "held after lock exits"
    );
    assert_eq!(run(&store, &["unlock", "job", "--owner", owner]).0, 0);
    assert_eq!(
        run(&store, &["exec", "job", "-n", "--", "true"]).0,
        0,
        "free after unlock"
    );
}

fn lock_json_has_the_documented_shape(store: Store) {
    let (code, out, _) = run(&store, &["lock", "shape", "--ttl", "10m", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["key"], "shape");
    assert!(v["owner"].as_str().is_some_and(|o| !o.is_empty()));
    assert!(v["fencing_token"].as_u64().is_some_and(|t| t > 0));
    assert_eq!(v["ttl_ms"], 600_000);
    let expires = v["expires_at"].as_str().expect("expires_at");
    let when = humantime::parse_rfc3339(expires).expect("RFC 3339");
    let left = when
        .duration_since(std::time::SystemTime::now())
        .expect("in the future");
    assert!(
        left > Duration::from_secs(590) && left <= Duration::from_secs(600),
        "{left:?}"
    );
}

fn export_sets_up_a_script_that_can_nest(store: Store) {
    let bin = support::dlock_bin();
    let b = bin.display();
    let script = format!(
        r#"eval "$({b} lock scripted --ttl 1m --export)" || exit 10
           outer=$DLOCK_FENCING_TOKEN
           inner=$({b} exec scripted -n -- sh -c 'echo $DLOCK_FENCING_TOKEN') || exit 11
           [ "$inner" = "$outer" ] || exit 12
           {b} exec scripted -n -- true || exit 13
           {b} unlock scripted || exit 14
           {b} unlock scripted; [ $? = 77 ] || exit 15"#
    );
    assert_eq!(store.shell(&script).status().unwrap().code(), Some(0));
    assert_eq!(
        run(&store, &["exec", "scripted", "-n", "--", "true"]).0,
        0,
        "released by the script"
    );
}

fn wrong_owner_is_refused_and_changes_nothing(store: Store) {
    let (_, owner, _) = run(&store, &["lock", "mine", "--ttl", "1m"]);
    let owner = owner.trim();
    let (code, _, err) = run(&store, &["unlock", "mine", "--owner", "0000000000000000"]);
    assert_eq!(code, 77);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("mine"), "names the key: {err}");
    assert_eq!(
        run(&store, &["renew", "mine", "--owner", "0000000000000000"]).0,
        77
    );
    assert_eq!(
        run(&store, &["unlock", "mine"]).0,
        2,
        "no owner at all is a usage error"
    );
    assert_eq!(
        run(&store, &["lock", "mine", "-n", "-q"]).0,
        75,
        "still held"
    );
    assert_eq!(
        run_as(&store, owner, &["unlock", "mine"]),
        0,
        "DLOCK_OWNER works"
    );
}

fn expired_lease_cannot_be_renewed_or_unlocked(store: Store) {
    let ttl = format!("{}ms", 200 * store.slowdown(Duration::from_millis(200)));
    let (_, owner, _) = run(&store, &["lock", "short", "--ttl", &ttl]);
    let owner = owner.trim().to_string();
    assert!(support::wait_for(Duration::from_secs(5), || run(
        &store,
        &["lock", "short", "-n", "-q", "--ttl", "1m"]
    )
    .0 == 0));
    assert_eq!(run(&store, &["renew", "short", "--owner", &owner]).0, 77);
    assert_eq!(run(&store, &["unlock", "short", "--owner", &owner]).0, 77);
    assert_eq!(
        run(&store, &["lock", "short", "-n", "-q"]).0,
        75,
        "the new holder keeps it"
    );
}

fn force_releases_whoever_holds_it(store: Store) {
    let (_, owner, _) = run(&store, &["lock", "stuck", "--ttl", "1h"]);
    let (code, _, err) = run(&store, &["unlock", "stuck", "--force"]);
    assert_eq!(code, 0);
    assert!(
        err.contains("forced") && err.contains(owner.trim()),
        "says so on stderr: {err}"
    );
    assert_eq!(run(&store, &["lock", "stuck", "-n", "-q"]).0, 0);
}

fn renew_extends_the_lease(store: Store) {
    if matches!(store, Store::Etcd(_)) {
        return etcd_renewal_keeps_the_granted_ttl(store);
    }
    let k = store.slowdown(Duration::from_millis(300));
    let ttl = format!("{}ms", 300 * k);
    let (_, owner, _) = run(&store, &["lock", "extended", "--ttl", &ttl]);
    let owner = owner.trim();
    assert_eq!(
        run(
            &store,
            &["renew", "extended", "--owner", owner, "--ttl", "1m"]
        )
        .0,
        0
    );
    std::thread::sleep(Duration::from_millis(600) * k); // past the original TTL
    assert_eq!(
        run(&store, &["lock", "extended", "-n", "-q"]).0,
        75,
        "renewed lease still held"
    );
    let (code, out, _) = run(
        &store,
        &[
            "renew", "extended", "--owner", owner, "--ttl", "2m", "--json",
        ],
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ttl_ms"], 120_000);
}

/// An etcd lease keeps the TTL it was granted with (docs/stores/etcd.md): a renewal to a longer TTL
/// is refused and changes nothing; one to the granted TTL extends the lease by that TTL.
fn etcd_renewal_keeps_the_granted_ttl(store: Store) {
    let (_, owner, _) = run(&store, &["lock", "extended", "--ttl", "2s"]);
    let owner = owner.trim();
    let (code, _, err) = run(
        &store,
        &["renew", "extended", "--owner", owner, "--ttl", "1m"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'extended'") && err.contains("(2s)"), "{err}");
    std::thread::sleep(Duration::from_secs(1));
    let renew = [
        "renew", "extended", "--owner", owner, "--ttl", "2s", "--json",
    ];
    let (code, out, err) = run(&store, &renew);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ttl_ms"], 2_000);
    std::thread::sleep(Duration::from_millis(1_500)); // past the original TTL
    assert_eq!(
        run(&store, &["lock", "extended", "-n", "-q"]).0,
        75,
        "renewed lease still held"
    );
}

fn status_shows_holders_and_exits_1_when_free(store: Store) {
    let (_, owner, _) = run(&store, &["lock", "held-one", "--ttl", "1m"]);
    let (code, out, _) = run(&store, &["status", "held-one"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("held-one") && out.contains(owner.trim()),
        "{out}"
    );
    assert!(out.contains("dlock lock"), "shows the command: {out}");
    assert_eq!(run(&store, &["status", "held-one", "free-one"]).0, 1);
    assert_eq!(run(&store, &["status", "free-one"]).0, 1);
    let (code, out, _) = run(&store, &["status"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("held-one") && !out.contains("free-one"),
        "{out}"
    );
}

fn status_json_has_the_documented_shape(store: Store) {
    run(&store, &["lock", "b-key", "--ttl", "1m"]);
    run(&store, &["lock", "a-key", "--ttl", "1m"]);
    let (code, out, _) = run(&store, &["status", "--json"]);
    assert_eq!(code, 0);
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON per line"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows[0]["key"], "a-key", "sorted by key");
    for row in &rows {
        assert_eq!(row["held"], true);
        for field in ["owner", "host", "user", "command", "acquired_at", "backend"] {
            assert!(row[field].is_string(), "{field} in {row}");
        }
        for field in ["fencing_token", "pid", "held_for_ms", "ttl_left_ms"] {
            assert!(row[field].is_u64(), "{field} in {row}");
        }
        assert!(row["ttl_left_ms"].as_u64().unwrap() <= 60_000);
    }
    let (code, out, _) = run(&store, &["status", "--json", "nobody"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["held"], false);
    assert_eq!(v["key"], "nobody");
}

fn lock_reenters_with_the_same_token(store: Store) {
    let (_, out, _) = run(&store, &["lock", "re", "--ttl", "1m", "--json"]);
    let first: Value = serde_json::from_str(out.trim()).unwrap();
    let owner = first["owner"].as_str().unwrap();
    let again = store
        .dlock()
        .env("DLOCK_OWNER", owner)
        .args(["lock", "re", "-n", "--json"])
        .output()
        .unwrap();
    assert!(again.status.success());
    let second: Value =
        serde_json::from_str(String::from_utf8_lossy(&again.stdout).trim()).unwrap();
    assert_eq!(second["fencing_token"], first["fencing_token"]);
    assert_eq!(second["owner"], first["owner"]);
    assert_eq!(second["reentered"], true);
    assert_eq!(run_as(&store, owner, &["unlock", "re"]), 0);
    assert_eq!(
        run(&store, &["lock", "re", "-n", "-q"]).0,
        75,
        "the outer acquisition still holds it"
    );
    assert_eq!(run_as(&store, owner, &["unlock", "re"]), 0);
    assert_eq!(
        run(&store, &["lock", "re", "-n", "-q"]).0,
        0,
        "free after the outermost unlock"
    );
}

/// One damaged key file does not hide the rest of the local store: `status` lists every
/// readable lock, names the damaged file on stderr, and exits 70 after the listing;
/// `status` of that key alone fails with 70 naming it.
#[test]
fn status_lists_the_other_keys_past_a_damaged_file() {
    let store = Store::local();
    let Store::Local(dir) = &store else {
        unreachable!()
    };
    for key in ["a-held", "c-held", "b-broken"] {
        assert_eq!(run(&store, &["lock", key, "--ttl", "1m"]).0, 0);
    }
    let broken = dir.path().join("b-broken.dlock");
    assert!(broken.is_file(), "the key file is named after the key");
    std::fs::write(&broken, b"").unwrap(); // a short file is damage, never a new key
    let shown = broken.display().to_string();

    for json in [false, true] {
        let args: &[&str] = if json {
            &["status", "--json"]
        } else {
            &["status"]
        };
        let (code, out, err) = run(&store, args);
        assert_eq!(code, 70, "{out}{err}");
        assert!(out.contains("a-held") && out.contains("c-held"), "{out}");
        assert!(!out.contains("b-broken"), "{out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&shown) && err.contains("damaged"), "{err}");
        if json {
            assert_eq!(out.lines().count(), 2, "{out}");
        }
    }
    let (code, out, err) = run(&store, &["status", "b-broken"]);
    assert_eq!(code, 70, "{out}{err}");
    assert!(err.contains(&shown), "{err}");
    // Only the damaged file: nothing readable is held, and the exit code still says so.
    for key in ["a-held", "c-held"] {
        assert_eq!(run(&store, &["unlock", key, "--force"]).0, 0);
    }
    let (code, out, err) = run(&store, &["status"]);
    assert_eq!(code, 70, "{out}{err}");
    assert!(!out.contains("no locks held"), "{out}");
    assert!(err.contains(&shown), "{err}");
}
