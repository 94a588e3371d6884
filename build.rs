//! Computes the SHA1 of each Redis script (`src/backend/redis/*.lua`, each with
//! `common.lua` in front, exactly as `src/backend/redis/scripts.rs` sends it, and
//! `src/backend/redis/plain/*.lua` alone, as `plain/scripts.rs` sends them) at build time, so
//! that `dlock` does not hash some 20 KB of Lua on every run only to send `EVALSHA`.
//! A unit test in `scripts.rs` checks the two agree. It also sets `cfg(servers)` (below).

use std::fs;
use std::path::Path;

fn main() {
    let dir = Path::new("src/backend/redis");
    // The scripts only: the Rust files beside them do not change the hashes.
    let read = |name: &str| {
        let path = dir.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let common = read("common.lua");
    for name in [
        "acquire", "renew", "release", "leave", "fence", "linger", "share",
    ] {
        let body = format!("{common}\n{}", read(&format!("{name}.lua")));
        let sha = sha1_smol::Sha1::from(body).digest().to_string();
        println!(
            "cargo:rustc-env=DLOCK_LUA_SHA_{}={sha}",
            name.to_uppercase()
        );
    }
    // `?layout=plain`'s scripts stand alone: they share none of the helpers.
    for name in ["acquire", "renew", "release", "status", "fence"] {
        let body = read(&format!("plain/{name}.lua"));
        let sha = sha1_smol::Sha1::from(body).digest().to_string();
        println!(
            "cargo:rustc-env=DLOCK_LUA_SHA_PLAIN_{}={sha}",
            name.to_uppercase()
        );
    }
    // `cfg(servers)`: a store that runs on servers is built in (every store's feature but
    // the local store's), so that the tests name that condition once (the fault matrix).
    println!("cargo::rustc-check-cfg=cfg(servers)");
    let stores = [
        "REDIS",
        "ETCD",
        "ZOOKEEPER",
        "POSTGRES",
        "MYSQL",
        "MEMCACHED",
    ];
    if stores
        .iter()
        .any(|f| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some())
    {
        println!("cargo::rustc-cfg=servers");
    }
}
