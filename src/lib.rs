//! dlock: distributed locks for cron jobs and CI pipelines.
//!
//! `dlock exec KEY -- CMD` acquires a lease on KEY, runs CMD while renewing the lease in the
//! background, exports a fencing token, forwards signals, kills CMD before the lease can
//! expire if renewal fails, and releases KEY when CMD ends.
//!
//! # Layout
//!
//! How the parts fit, the store seam and how to add a store: `docs/design.md`.
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
//!   the one waiting loop in [`backend::waiting`]; the URL schemes in [`backend::registry`]; a URL's typed target in [`backend::target`]; opening a backend in [`backend::spec`];
//!   the one URL reader and redaction rule in [`backend::url`] (each store's `url.rs` turns
//!   its reading into the store's typed target);
//!   one folder per store: [`backend::local`] (embedded, the default), [`backend::redis`]
//!   (one server, Sentinel, Cluster; `redis/plain/`: `?layout=plain`, the application's own
//!   `SET K token NX PX` lock), [`backend::redlock`] (a majority of Redis servers),
//!   [`backend::etcd`], [`backend::zookeeper`], [`backend::postgres`], [`backend::mysql`],
//!   [`backend::memcached`] (one server or a quorum); [`backend::quorum`] counts votes for
//!   both quorums. Every store but the local one is the cargo feature of its name, gated on
//!   its `mod` line and in the registry (docs/building.md).
//!
//!   No import circle among files, `mod.rs` included (`tests/imports.rs` reads every
//!   `use` and path): [`ids`] and [`terminal`] import nothing of the crate's logic;
//!   [`backend`]'s `mod.rs` holds the vocabulary (requests, leases, holders, run records,
//!   statuses) and the [`backend::Backend`] trait and imports no store (where a waiter
//!   stands in a queue is [`backend::queueing`], below it);
//!   [`backend::waiting::pace`] (the back-off and the ride-out) sits below both the seam
//!   and the loop; the store folders come above them and the shared recipes
//!   ([`backend::sharing`], [`backend::group`], [`backend::sql`], [`backend::quorum`],
//!   [`backend::line`]);
//!   [`backend::target`] (a URL's typed target, and opening it) above the stores;
//!   [`backend::registry`] (the schemes, each reading its URLs into a target) above it;
//!   and on top [`backend::spec`], which reads `--url` into a
//!   [`backend::spec::BackendSpec`] of typed targets, each URL read once, and opens it
//!   ([`backend::spec::open`]). Inside a folder, a file imports an item from the file
//!   that defines it, not through the folder's `mod.rs`.
//!
//!   A store folder names its files after this template, each present when the store
//!   has the part:
//!   `url.rs` (its URL read into the store's typed target), `connect.rs` (connections,
//!   timeouts, TLS, the one-line errors and which of them are transient), `backend.rs`
//!   (the store value, when it is more than the `LockStore`), `store.rs` (the
//!   `impl LockStore`), `lease.rs` (one attempt, renew, release), `shared.rs` (`--shared`
//!   and `--limit N` holders), `wait.rs` (how a waiter sleeps and is woken), `status.rs`
//!   (`status` and listing), `runs.rs` (the run records), `linger.rs`
//!   (`--hold-at-least`), and a file for what an attempt and its `shared.rs` branch both
//!   read (`row.rs` in the SQL stores). A folder's `mod.rs` says what each file holds;
//!   parts a store has beyond the template (its key layout, its wire client, a quorum's
//!   members) get files of their own listed there.
//!   Where a folder differs, and why:
//!   - `local/`: kernel locks do its waiting, so it is a `Backend` of its own rather
//!     than a `LockStore`: `backend.rs` is the value and its acquire loop, `store.rs`
//!     the synchronous state transitions of a key file (`held.rs` those of a held key,
//!     and its status), `queue.rs` the waiter list `status` shows, `waiter.rs` how an
//!     acquisition sleeps, `wait.rs` the bridge from blocking kernel locks to async code.
//!   - `etcd/` and `zookeeper/`: a line of contenders ordered by creation, as
//!     `etcdctl lock` and Curator write it. What both decide alike is
//!     [`backend::line`]'s (an entry's metadata and its JSON, who at the head holds, what
//!     a waiter watches, a line's status; each store's entry implements its
//!     `Contender`); each store's own part is `recipe.rs`/`layout.rs` (its keys or node
//!     names, its transactions), the line's I/O in `line.rs` (ZooKeeper), TLS in
//!     `tls.rs` (neither has a `connect.rs`).
//!     etcd's own gRPC client in `client.rs`, `streams.rs`, `failure.rs`, `proto.rs`
//!     (its `connect.rs`), its `LockStore` in `seam.rs` (its `store.rs` is the value and
//!     its acquisition pieces, `took.rs` the release of what it took), a waiter's wait
//!     in `deletion.rs`, an election's keys in `proclaim.rs`. ZooKeeper connects in
//!     `session.rs` (a session is what keeps its leases), tries in `attempt.rs` (its
//!     `lease.rs`; renew, release and status are `store.rs`'s) and lists and watches
//!     locks in `listing.rs`.
//!   - `postgres/` and `mysql/`: the run records share the status tables' reading, so
//!     `status.rs` holds both; `schema.rs` holds every statement. The steps of a
//!     group's transaction are written once in [`backend::sql`]'s `shared.rs` (provided
//!     trait methods); each store's `shared.rs` supplies only its statements and row.
//!     PostgreSQL has no `wait.rs`: its waiters sleep on LISTEN/NOTIFY in `store.rs`;
//!     MySQL's block on named locks in `wait.rs`. `postgres/advisory/` and `mysql/user_lock/`
//!     (`?lock=advisory`, `?lock=get_lock`: the application's own locks, held by a
//!     session of dlock's) have `backend.rs` (the value and the sessions it keeps),
//!     `session.rs` (a session's statements), `store.rs`, and `status.rs`/`lock_id.rs`
//!     (PostgreSQL: listing `pg_locks`, and which lock a KEY names).
//!   - `redis/`, `redlock/`, `memcached/`: Lua scripts beside `scripts.rs` (Redis); the
//!     quorum's rounds and members in `round.rs`/`member.rs` (Redlock) and `quorum/`
//!     (memcached), counted by [`backend::quorum`]. Redis connects in `connect.rs`,
//!     `conn.rs` (one connection type over a server or a Cluster) and `cluster.rs`, and
//!     keeps its URL tests in `url/`; `plain/` has `keys.rs`, `lease.rs` and `store.rs`.
//!     Redlock's servers are Redis stores (no `url.rs` or `connect.rs` of its own), and
//!     it is a `Backend` of its own (its own waiting loop, `wait.rs`): `backend.rs` is
//!     the value, renew, release and status, `tuning.rs` its time limits, `renew.rs`
//!     renewal on enough servers. memcached's `store.rs` is the value and its
//!     `LockStore`, `client.rs` its connections.
//! * [`supervisor`]: spawning the child in its own process group, forwarding signals,
//!   killing it when the lease is lost, and mapping its status to an exit code.
//! * [`spawn`]: starting the child as `posix_spawn` does, with a parent-death signal (the
//!   crate's one module with `unsafe` code).
//! * [`cmd`]: one file per subcommand; `expect` (below [`output`], which shows it): the
//!   expected wait of one acquisition, read from the key's run history in the background.
//! * [`output`]: human and JSON output.
//! * [`terminal`]: text from stores and other users escaped for a terminal line (the
//!   one rule for every error, warning, event, waiting line and `status` row), and `say!`,
//!   which prints such a line.
//! * [`events`]: what `-v` and `--log-format json` tell about a run, on stderr.
//! * [`metrics`]: node_exporter textfile metrics of an `exec` run (`--metrics-file`).
//! * [`holder`]: the metadata (host, pid, user, command) stored with each lease.
//! * [`ids`]: owner ids and random numbers (a leaf: it imports nothing of the crate).
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
mod expect;
pub mod generate;
pub mod holder;
pub mod ids;
pub mod lease;
pub mod metrics;
pub mod output;
pub mod spawn;
pub mod supervisor;
pub mod terminal;
