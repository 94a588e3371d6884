//! Every environment variable dlock reads or sets, in one place, so that none is named twice
//! and a harness can clear all that reach dlock ([`INHERITED`]).

/// The backend URLs (comma-separated) when no `--url` is given.
pub const URL: &str = "DLOCK_URL";
/// Set by `exec` for its command: the descriptor of a sealed file holding the backend URLs
/// with their passwords (see `crate::credentials`).
pub const URL_FD: &str = "DLOCK_URL_FD";
/// The local store's directory.
pub const DIR: &str = "DLOCK_DIR";
/// Set by `exec`: the owner id of the innermost lease (also read by `unlock`/`renew`).
pub const OWNER: &str = "DLOCK_OWNER";
/// Set by `exec`: every owner id of the enclosing leases, for re-entry.
pub const OWNERS: &str = "DLOCK_OWNERS";
/// Set by `exec`: the key its command runs under.
pub const KEY: &str = "DLOCK_KEY";
/// Set by `exec`: the lease's fencing token.
pub const FENCING_TOKEN: &str = "DLOCK_FENCING_TOKEN";
/// `elect`: what the leader proclaims (`--value`), set for its command.
pub const LEADER_VALUE: &str = "DLOCK_LEADER_VALUE";
/// A Redis password, as redis-cli reads it.
pub const REDIS_AUTH: &str = "REDISCLI_AUTH";
/// A PostgreSQL password, as psql reads it, when the URL carries none.
pub const PG_PASSWORD: &str = "PGPASSWORD";
/// A PostgreSQL user, as psql reads it, when the URL names none.
pub const PG_USER: &str = "PGUSER";
/// A MySQL password, as the `mysql` client reads it, when the URL carries none.
pub const MYSQL_PWD: &str = "MYSQL_PWD";
/// PEM file of CA certificates to trust for TLS.
pub const TLS_CA: &str = "DLOCK_TLS_CA";
/// PEM client certificate for TLS.
pub const TLS_CERT: &str = "DLOCK_TLS_CERT";
/// PEM key of the client certificate.
pub const TLS_KEY: &str = "DLOCK_TLS_KEY";
/// The password of the Sentinels themselves.
pub const SENTINEL_PASSWORD: &str = "DLOCK_SENTINEL_PASSWORD";
/// `text` or `json`: how events are written (`--log-format`).
pub const LOG_FORMAT: &str = "DLOCK_LOG_FORMAT";
/// A directory for one metrics file per key (`--metrics-file`).
pub const METRICS_DIR: &str = "DLOCK_METRICS_DIR";

/// The variables through which a caller's setting or an enclosing lease reaches `dlock`
/// (`exec` sets the lease ones for its command). Harnesses that run `dlock` clear them, so
/// that whatever the caller's shell holds cannot leak into a measurement or a test.
pub const INHERITED: [&str; 13] = [
    URL,
    URL_FD,
    OWNER,
    OWNERS,
    KEY,
    FENCING_TOKEN,
    DIR,
    REDIS_AUTH,
    LOG_FORMAT,
    METRICS_DIR,
    PG_PASSWORD,
    PG_USER,
    MYSQL_PWD,
];
