//! dlock: distributed locks for cron jobs and CI pipelines.
//!
//! `dlock exec KEY -- CMD` acquires a lease on KEY, runs CMD while renewing the lease in the
//! background, exports a fencing token, forwards signals, kills CMD before the lease can
//! expire if renewal fails, and releases KEY when CMD ends.
//!
//! # Layout
//!
//! * [`cli`]: the clap definition, the single source of `--help`, completions and man pages.
//! * [`generate`]: completions and man pages from [`cli`] (checked in under `completions/`
//!   and `man/`; `tests/generated.rs` fails when they are stale).
//! * [`config`]: checked command-line values (durations, keys, the local store's directory).
//! * [`credentials`]: backend passwords kept out of `exec`'s command's environment, and
//!   read back by nested calls.
//! * [`env`]: every environment variable dlock reads or sets.
//! * [`error`] and [`exit`]: one error type, and every exit code in one place.
//!   No `anyhow`: every failure is an [`error::Error`] variant that decides its exit code,
//!   so an untyped error chain would only have to be downcast back to it.
//! * [`lease`]: lease arithmetic: renewal interval, when the child must die.
//! * [`backend`]: the [`backend::Backend`] trait the commands call; the store seam
//!   [`backend::store::LockStore`], whose implementors write only their primitives, and
//!   the one waiting loop in [`backend::waiting`]; the URL schemes in [`backend::registry`];
//!   the one URL reader and redaction rule in [`backend::url`] (each store's `url.rs` turns
//!   its reading into the store's typed target);
//!   one folder per store: [`backend::local`] (embedded, the default), [`backend::redis`]
//!   (one server, Sentinel, Cluster), [`backend::redlock`] (a majority of Redis servers),
//!   [`backend::etcd`], [`backend::zookeeper`], [`backend::postgres`], [`backend::mysql`],
//!   [`backend::memcached`] (one server or a quorum); [`backend::quorum`] counts votes for
//!   both quorums. Every store but the local one is the cargo feature of its name, gated on
//!   its `mod` line and in the registry (docs/building.md).
//! * [`supervisor`]: spawning the child in its own process group, forwarding signals,
//!   killing it when the lease is lost, and mapping its status to an exit code.
//! * [`spawn`]: starting the child as `posix_spawn` does, with a parent-death signal (the
//!   crate's one module with `unsafe` code).
//! * [`cmd`]: one file per subcommand.
//! * [`output`]: human and JSON output.
//! * [`terminal`]: text from stores and other users escaped for a terminal line (the
//!   one rule for every error, warning, event, waiting line and `status` row), and `say!`,
//!   which prints such a line.
//! * [`events`]: what `-v` and `--log-format json` tell about a run, on stderr.
//! * [`metrics`]: node_exporter textfile metrics of an `exec` run (`--metrics-file`).
//! * [`holder`]: the metadata (host, pid, user, command) stored with each lease.
//!
//! Outside `src/`: `build.rs` hashes the Redis Lua scripts at build time, and
//! `.cargo/config.toml` links the binary statically (start-up time is most of what one
//! `dlock exec` costs), and `benches/suite/` is the benchmark suite (`sections/` measure,
//! `report.rs` prints and writes; its Redis servers come from the tests' `tests/support/servers`).
//! `tests/` is one integration test binary: `tests/tests.rs` lists its modules, `tests/macros.rs`
//! holds the one list of backends that the CLI matrix and the conformance suite expand from, and
//! `tests/support/` the servers and helpers.

#![deny(unsafe_code)]

pub mod backend;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod credentials;
pub mod env;
pub mod error;
pub mod events;
pub mod exit;
pub mod generate;
pub mod holder;
pub mod lease;
pub mod metrics;
pub mod output;
pub mod spawn;
pub mod supervisor;
pub mod terminal;
