//! The backend matrix, written once.
//!
//! [`with_backends!`] holds the one list of backends; the CLI matrix
//! ([`on_every_backend!`]) and the conformance suite ([`conformance_suite!`]) both expand
//! from it. Adding a backend is one name in that list, plus what the name stands for in
//! `support/backends.rs` (a `Store` constructor for a CLI backend; a conformance factory and
//! a TTL unit for every backend), the declaration of its capabilities here ([`caps`], checked
//! by `capabilities.rs` and the fault matrix), and its server in `support/`.

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

/// What a backend does beyond what every backend does, declared once per backend of the
/// list above ([`caps`]). Tests decide from it which checks apply, and
/// `conformance::suite::*_as_declared` check each claim both ways, so that a declaration
/// that goes stale fails a test.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// `linger` leaves an `exec` lease held after this process is gone, to expire by itself
    /// (not a ZooKeeper session, which ends with its process).
    pub lingering: bool,
    /// `watch` sleeps until the store tells of a change; the others poll.
    pub notified: bool,
    /// [`Caps::notified`] also for a lease whose holder has exited (`dlock lock`): not on
    /// MySQL, whose holders wake watchers with a named lock that ends with their session.
    pub notified_after_exit: bool,
    /// Waiters line up first come first served and `status` lists them; elsewhere `status`
    /// cannot tell (no `waiters`) and a waiter retries on its own.
    pub queue: bool,
    /// `--shared` and `--limit N`; elsewhere they are refused.
    pub sharing: bool,
    /// `--priority N` and `--supersede` order the queue (`queue_order.rs`); elsewhere
    /// they are refused in one line (`queue::*::priority_and_supersede_are_refused_in_one_line`
    /// checks both ways).
    pub ordered: bool,
    /// A lease outlives a restart of its server (which keeps it on disk, or keeps the
    /// session), and its holder renews on; elsewhere the restart loses it (exit 79).
    /// Checked both ways by `faults::restarted_while_holding_is_what_the_store_declares`.
    // Read by the fault matrix only, which needs a store with a server.
    #[cfg_attr(not(servers), allow(dead_code))]
    pub durable: bool,
}

/// One declaration per backend of [`with_backends!`]: the same names as
/// `support::backends::ttl_unit` and `support::backends::factory`.
pub mod caps {
    use super::Caps;

    /// Every capability.
    const ALL: Caps = Caps {
        lingering: true,
        notified: true,
        notified_after_exit: true,
        queue: true,
        sharing: true,
        ordered: true,
        durable: true,
    };

    /// No queue, no notifications: a waiter retries, a watcher polls; kept in memory only.
    const POLLED: Caps = Caps {
        notified: false,
        notified_after_exit: false,
        queue: false,
        ordered: false,
        durable: false,
        ..ALL
    };

    /// Redis as the tests start it: no persistence.
    const IN_MEMORY: Caps = Caps {
        durable: false,
        ..ALL
    };

    pub fn local() -> Caps {
        ALL
    }

    pub fn redis() -> Caps {
        IN_MEMORY
    }

    pub fn redis_cluster() -> Caps {
        IN_MEMORY
    }

    pub fn redlock() -> Caps {
        POLLED
    }

    /// The queue order is the create revision, shared with `etcdctl lock`.
    pub fn etcd() -> Caps {
        Caps {
            ordered: false,
            ..ALL
        }
    }

    pub fn memcached() -> Caps {
        POLLED
    }

    pub fn memcached_quorum() -> Caps {
        POLLED
    }

    /// An `exec` lease is a session, which ends with its process; the queue order is the
    /// node sequence, shared with Curator.
    pub fn zookeeper() -> Caps {
        Caps {
            lingering: false,
            ordered: false,
            ..ALL
        }
    }

    /// LISTEN/NOTIFY.
    pub fn postgres() -> Caps {
        ALL
    }

    /// Named locks (`GET_LOCK`) held by the holder's session: a watcher of a `dlock lock`
    /// lease, whose process has exited, polls.
    pub fn mysql() -> Caps {
        Caps {
            notified_after_exit: false,
            ..ALL
        }
    }

    /// The in-memory reference store keeps exclusive leases in arrival order only.
    pub fn memory() -> Caps {
        Caps {
            sharing: false,
            ordered: false,
            ..ALL
        }
    }
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

/// Runs each test body `fn name(store: Store)` once per CLI backend that has servers to
/// fail ([`Store::servers`](crate::support::Store::servers)): the fault matrix of `faults.rs`.
macro_rules! on_every_server {
    ($($name:ident),* $(,)?) => {
        with_backends!(server_matrix! { [$($name),*] });
    };
}

/// [`on_every_server!`] for the backends [`with_backends!`] passes.
macro_rules! server_matrix {
    (cli: [$($backend:ident($($cfg:tt)*)),*], library: [$($_library:ident),*]; $names:tt) => {
        $( server_tests!($backend($($cfg)*) $names); )*
    };
}

/// The tests of one backend in [`server_matrix!`]: none where no server can fail (the
/// local store) or where a fault is one node's (a Redis Cluster, in `redis_cluster.rs`).
macro_rules! server_tests {
    (local($($cfg:tt)*) $names:tt) => {};
    (redis_cluster($($cfg:tt)*) $names:tt) => {};
    ($backend:ident($($cfg:tt)*) $names:tt) => {
        #[cfg($($cfg)*)] mod $backend { cli_tests!($backend $names); }
    };
}

/// Instantiates each named test of `conformance::suite` for every backend, as
/// `conformance::BACKEND::TEST`, with the backend's factory from `support::backends::factory`,
/// its TTL unit from `support::backends::ttl_unit` and its capabilities from [`caps`].
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
                let caps = crate::macros::caps::$backend();
                let test = crate::conformance::suite::$test(crate::support::backends::factory::$backend);
                let test = crate::conformance::CAPS.scope(caps, test);
                crate::conformance::TTL_UNIT.scope(unit, test).await
            }
        )*
    };
}
