//! One cargo feature per store (Cargo.toml): `dlock --version` names the stores a build
//! has, and a URL of a store it was built without is refused in one line (exit 2) that says
//! so, whatever the build. Run in a smaller build with e.g. `cargo test
//! --no-default-features --features redis --test integration features::`.

use std::process::Output;

use crate::support::dlock;

/// Every store and whether this build has it, read from the features the tests were built
/// with, not from dlock's own table. Redlock comes with the Redis store.
const STORES: &[(&str, bool)] = &[
    ("local", true),
    ("redis", cfg!(feature = "redis")),
    ("redlock", cfg!(feature = "redis")),
    ("etcd", cfg!(feature = "etcd")),
    ("zookeeper", cfg!(feature = "zookeeper")),
    ("postgres", cfg!(feature = "postgres")),
    ("mysql", cfg!(feature = "mysql")),
    ("memcached", cfg!(feature = "memcached")),
];

fn run(args: &[&str]) -> Output {
    dlock().args(args).output().expect("run dlock")
}

#[test]
fn version_lists_the_stores_of_this_build() {
    let out = run(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let built: Vec<&str> = STORES.iter().filter(|(_, b)| *b).map(|(s, _)| *s).collect();
    let want = format!(
        "dlock {} (stores: {})\n",
        env!("CARGO_PKG_VERSION"),
        built.join(", ")
    );
    assert_eq!(text, want);
    let short = run(&["-V"]);
    let want = format!("dlock {}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(String::from_utf8_lossy(&short.stdout), want);
}

/// A URL of each store this build lacks (none in a default build): exit 2, one line that
/// names the store and its feature, never the password, nothing opened (the port is never
/// dialled: a closed one would be 69).
#[test]
fn a_url_of_a_store_left_out_is_refused_in_one_line() {
    let urls = [
        ("redis", "redis://u:Secr3t@127.0.0.1:1"),
        ("redis", "redis+cluster://u:Secr3t@127.0.0.1:1"),
        ("etcd", "etcds://u:Secr3t@127.0.0.1:1"),
        ("zookeeper", "zk://u:Secr3t@127.0.0.1:1"),
        ("postgres", "postgres://u:Secr3t@127.0.0.1:1/db"),
        ("mysql", "mariadb://u:Secr3t@127.0.0.1:1/db"),
        ("memcached", "memcached://127.0.0.1:1"),
    ];
    let left_out = urls
        .iter()
        .filter(|(store, _)| STORES.iter().any(|(s, b)| s == store && !b));
    for (store, url) in left_out {
        for args in [
            &["--url", url, "exec", "k", "--", "true"][..],
            &["--url", url, "status"][..],
        ] {
            let out = run(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{url}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            let says = format!("built without the {store} store (cargo feature `{store}`)");
            assert!(err.contains(&says), "{err}");
            assert!(!err.contains("Secr3t"), "{err}");
        }
    }
}
