//! Every integration test, in one binary: the harness in `support/` is compiled and linked
//! once. Run one group with `cargo test --test integration MODULE::`, e.g. `exec::redis::`.
//!
//! Table of contents:
//! - `macros`: the one list of backends, and the matrices that expand from it
//!   (`on_every_backend!` for CLI tests, `conformance_suite!` for the library).
//! - `support`: real servers on free ports, the `dlock` command, the store of a CLI test,
//!   the conformance factories and the library helpers (`req`, `no_wait`, …).
//!
//! Library API:
//! - `conformance`: the behaviour every backend shares, run on every backend (its waiting
//!   tests in `conformance_waiting`);
//!   `capabilities`: what a backend declares it does beyond that (`macros::caps`),
//!   checked both ways, in the same suite.
//! - `local_backend`, `redis_backend`, `redlock`: what only one backend can be asked;
//!   `redlock_cli`: Redlock through the binary (pauses, contention, passwords);
//!   `local_processes`: local holders and waiters in other processes, killed or stopped.
//! - `redis_waiters` (the queue, dead and unfair waiters), `redis_connect` (passwords, TLS,
//!   a paused or restarted server).
//! - `redis_sharing`: `--shared` and `--limit N` on Redis (group keys, TTLs, wake-ups).
//!
//! The `dlock` binary on every CLI backend:
//! - `elect` (`dlock elect`, `dlock leader`; `--rejoin` on frozen servers),
//!   `exec`, `scripts` (`lock`, `unlock`, `renew`, `status`), `job_control`, `wait_command`
//!   (`dlock wait`), `events`,
//!   `last_run` (the run record, `status --watch`), `lease_clock`, `cli_edges`, `sharing`
//!   (`--limit N`, `--shared`), `options` (`wait --json`/`-q`, `lock --if-unavailable skip`,
//!   detached `lock --shared`/`--limit`, `--no-fair`, `--kill-after`, `DLOCK_URL_FD`),
//!   `one_line` (a holder's newlines and escape sequences shown escaped, on one line).
//! - `queue`: the expected wait (run history, overdue, `status --json` per waiter) and the
//!   refusal of `--priority`/`--supersede` where dlock does not order the queue;
//!   `queue_order`: priorities and `--supersede` where it does (the local store, Redis,
//!   Redis Cluster, PostgreSQL, MySQL).
//!
//! The `dlock` binary against particular servers and failures:
//! - `faults`: the fault matrix (a server killed, paused or restarted while clients wait
//!   or hold), run on every store with servers through the one `Server` trait.
//! - `connections` (ACL, TLS, Sentinel, sockets, passwords), `redis_faults`, `unanswered`,
//!   `url_secrets` (no piece of a URL's password in any error, on every scheme).
//! - `redis_cluster`: a slot migrated while a lock is held, a master lost (killed, or its
//!   replica promoted) while `exec` runs; `redis_sentinel`: a Sentinel failover (1 master,
//!   2 replicas, 3 Sentinels) while `exec` holds a lock and a waiter queues;
//!   `redis_replicas`: `?min_replicas` (`WAIT`) with a master and a replica paused or killed.
//! - `elect_interop` (`dlock elect` with `etcdctl elect`, both orders, and `elect -l`).
//! - `etcd` (the client), `etcd_interop` (with `etcdctl lock`; passwords, TLS),
//!   `etcd_cluster` (leader and quorum loss, a restart, 8 loops while the leader dies, a
//!   waiter whose member dies).
//! - `memcached` (time limits, restart, eviction, the fencing counter, silent servers),
//!   `memcached_quorum` (three servers: conformance, one or two killed, a restarted or
//!   frozen member).
//! - `zookeeper` (TTL-node leases, session timeouts, a killed server, a leader lost),
//!   `zookeeper_acl` (what one user's nodes show others), `zookeeper_ensemble` (the leader
//!   killed and restarted under 6 exec loops),
//!   `zookeeper_interop` (with Curator's `InterProcessMutex`, compiled with `javac`),
//!   `elect_curator` (`dlock elect` with Curator's `LeaderSelector`, both orders).
//! - `postgres`: connections cut, the server killed, restarted and frozen, passwords, a
//!   role without DDL.
//! - `mysql` (on MariaDB): connections killed, the server killed, restarted and frozen,
//!   passwords, an account without DDL, tables made on first use, TLS; `mysql_waiters`
//!   (the queue, contending loops, semaphore holders, `dlock wait`).
//! - `sql_faults` (PostgreSQL and MariaDB): waiters behind a client frozen in a
//!   transaction, whose sessions are killed, or whose server pauses; errors naming the key.
//! - `applock_redlock`: `?layout=plain` on every Redlock server, with node `redlock`;
//! - `applock_sql`: `?lock=advisory` with `psql`, `applock_mysql`: `?lock=get_lock` with the
//!   `mariadb` client, holding the same lock both ways; cancelled waits, killed sessions, a
//!   paused server, 8 mixed contending loops.
//!
//! The repository and the harness:
//! - `docs`: the manual's `console` examples run, its links resolve, its store pages share
//!   their headings.
//! - `features`: one cargo feature per store: `--version` names the stores of the build,
//!   a URL of a store left out is refused in one line.
//! - `generated`: completions and man pages (`DLOCK_BLESS=1 cargo test --test integration
//!   generated::` rewrites them).
//! - `harness_smoke`: the servers start and restart, and every file here is declared below.
//! - `imports`: no import circle among the files of `src/`.

// A module of one store's tests carries the `cfg` of its cargo feature, and so does each
// backend of the matrices (`macros`): a build without a store compiles and runs the rest.

#[macro_use]
mod macros;
mod support;

mod capabilities;
mod conformance;
mod conformance_waiting;
mod local_backend;
mod local_processes;
#[cfg(feature = "redis")]
mod redis_backend;
#[cfg(feature = "redis")]
mod redis_connect;
#[cfg(feature = "redis")]
mod redis_sharing;
#[cfg(feature = "redis")]
mod redis_waiters;
#[cfg(feature = "redis")]
mod redlock;
#[cfg(feature = "redis")]
mod redlock_cli;

mod cli_edges;
mod elect;
mod events;
mod exec;
mod job_control;
mod last_run;
mod lease_clock;
mod one_line;
mod options;
mod queue;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod queue_order;
mod scripts;
mod sharing;
mod wait_command;

mod faults;

#[cfg(feature = "mysql")]
mod applock_mysql;
#[cfg(feature = "redis")]
mod applock_redis;
#[cfg(feature = "redis")]
mod applock_redlock;
#[cfg(feature = "postgres")]
mod applock_sql;
#[cfg(feature = "redis")]
mod connections;
#[cfg(feature = "zookeeper")]
mod elect_curator;
#[cfg(feature = "etcd")]
mod elect_interop;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_cluster;
#[cfg(feature = "etcd")]
mod etcd_interop;
#[cfg(feature = "memcached")]
mod memcached;
#[cfg(feature = "memcached")]
mod memcached_quorum;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "mysql")]
mod mysql_waiters;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis_cluster;
#[cfg(feature = "redis")]
mod redis_faults;
#[cfg(feature = "redis")]
mod redis_replicas;
#[cfg(feature = "redis")]
mod redis_sentinel;
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod sql_faults;
#[cfg(feature = "redis")]
mod unanswered;
mod url_secrets;
#[cfg(feature = "zookeeper")]
mod zookeeper;
#[cfg(feature = "zookeeper")]
mod zookeeper_acl;
#[cfg(feature = "zookeeper")]
mod zookeeper_ensemble;
#[cfg(feature = "zookeeper")]
mod zookeeper_interop;

mod docs;
mod features;
mod generated;
mod harness_smoke;
mod imports;
