//! The backend matrix, written once.
//!
//! [`with_backends!`] holds the one list of backends; the CLI matrix
//! ([`on_every_backend!`]) and the conformance suite ([`conformance_suite!`]) both expand
//! from it. Adding a backend is one name in that list, plus what the name stands for in
//! `support/backends.rs` (a `Store` constructor for a CLI backend; a conformance factory, a
//! TTL unit and the declaration of its capabilities, `caps`, for every backend) and its
//! server in `support/`.

/// Calls `$then! { cli: [...], library: [...]; ARGS }` with every backend the tests know.
///
/// `cli` backends are reached by the `dlock` binary, so they run both the CLI matrix and the
/// conformance suite; `library` ones only live inside one process (the in-memory reference
/// store), so they run the conformance suite only. Each CLI backend carries the `cfg` of
/// its store's cargo feature: a build without the store has none of its tests.
macro_rules! with_backends {
    ($then:ident! { $($args:tt)* }) => {
        $then! {
            cli: [
                local(all()),
                redis(feature = "redis"),
                redis_cluster(feature = "redis"),
                redlock(feature = "redis"),
                etcd(feature = "etcd"),
                memcached(feature = "memcached"),
                memcached_quorum(feature = "memcached"),
                zookeeper(feature = "zookeeper"),
                postgres(feature = "postgres"),
                mysql(feature = "mysql")
            ],
            library: [memory];
            $($args)*
        }
    };
}

/// Runs each test body `fn name(store: Store)` once per CLI backend, as `local::name`,
/// `redis::name`, `redlock::name`, `etcd::name`, each with a fresh [`Store`](crate::support::Store).
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        with_backends!(cli_matrix! { [$($name),*] });
    };
}

/// [`on_every_backend!`] for the backends [`with_backends!`] passes.
macro_rules! cli_matrix {
    (cli: [$($backend:ident($($cfg:tt)*)),*], library: [$($_library:ident),*]; $names:tt) => {
        $( #[cfg($($cfg)*)] mod $backend { cli_tests!($backend $names); } )*
    };
}

/// The tests of one backend in [`cli_matrix!`].
macro_rules! cli_tests {
    ($backend:ident [$($name:ident),*]) => {
        $(
            #[test]
            fn $name() {
                super::$name(crate::support::Store::$backend());
            }
        )*
    };
}

/// Instantiates each named test of `conformance::suite` for every backend, as
/// `conformance::BACKEND::TEST`, with the backend's factory from `support::backends::factory`,
/// its TTL unit from `support::backends::ttl_unit` and its capabilities from
/// `support::backends::caps`.
macro_rules! conformance_suite {
    ($($test:ident),* $(,)?) => {
        with_backends!(conformance_matrix! { [$($test),*] });
    };
}

/// [`conformance_suite!`] for the backends [`with_backends!`] passes.
macro_rules! conformance_matrix {
    (cli: [$($cli:ident($($cfg:tt)*)),*], library: [$($library:ident),*]; $tests:tt) => {
        $( #[cfg($($cfg)*)] mod $cli { conformance_tests!($cli $tests); } )*
        $( mod $library { conformance_tests!($library $tests); } )*
    };
}

/// The conformance tests of one backend in [`conformance_matrix!`].
macro_rules! conformance_tests {
    ($backend:ident [$($test:ident),*]) => {
        $(
            #[tokio::test]
            async fn $test() {
                let unit = crate::support::backends::ttl_unit::$backend();
                let caps = crate::support::backends::caps::$backend();
                let test = crate::conformance::suite::$test(crate::support::backends::factory::$backend);
                let test = crate::conformance::CAPS.scope(caps, test);
                crate::conformance::TTL_UNIT.scope(unit, test).await
            }
        )*
    };
}
