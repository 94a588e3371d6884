//! The two tables, and every statement dlock sends, as text built once from their names.
//!
//! * `<table>`: one row per key, kept forever once created so that its fencing counter
//!   (`token`) is never reset: owner, depth, expiry in milliseconds since the epoch on the
//!   server's clock, holder (JSON), and the last-run record. A free key has `owner` NULL
//!   (and `expires_at` when its last lease ended); an expired lease is free.
//! * `<table>_waiters`: the queue, one row per waiting acquisition, ordered by [`NEXT`]:
//!   `priority` (`--priority`, highest first), then `ticket` (arrival; ordering only: a
//!   skipped ticket costs nothing), each with a liveness deadline that the waiter
//!   refreshes as it looks again; a waiter whose session holds its named lock (see
//!   [`WAKE_PREFIX`]) is alive whatever its deadline. A `--supersede` waiter's row says
//!   so (`superseding`); a newer one marks it (`superseded_by`, the newer one's holder
//!   JSON), which takes it out of the line at once.
//!
//! Every change to a key's lease or queue that decides anything first locks its row
//! (`SELECT … FOR UPDATE`, or the `UPDATE` itself): the row lock serializes acquirers,
//! renewals and releases of one key. Both tables are InnoDB (row locks, transactions,
//! commits that survive a crash).

use crate::backend::group::GROUP_OWNER;

/// The server's clock in milliseconds since the epoch. `NOW(3)` is the statement's start
/// (a row lock waited for does not move it): a lease read live at the start is treated
/// as live, and one set from it ends no later than the holder was promised.
const NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

/// Milliseconds left until `col` (0 when past or NULL).
fn left(col: &str) -> String {
    format!("CAST(GREATEST(0, COALESCE({col}, 0) - {NOW_MS}) AS SIGNED)")
}

/// What a waiter's named lock (`GET_LOCK`) is called: this prefix and its waiter id. The
/// waiter holds it on its request connection from its first attempt until it leaves the
/// queue, or, granted, until it releases the key: whoever waits behind it blocks on it.
pub const WAKE_PREFIX: &str = "dlock-w:";

/// The named lock of the waiter whose id is `id`.
pub fn wake_name(id: &str) -> String {
    format!("{WAKE_PREFIX}{id}")
}

/// What the blocking connection of a `--supersede` waiter holds (this prefix and its
/// waiter id): `IS_USED_LOCK` of it names that connection, whose block the newer
/// superseding waiter ends with `KILL QUERY` (see `wait.rs`).
pub const BLOCKER_PREFIX: &str = "dlock-b:";

/// The named lock of the blocking connection of the waiter whose id is `id`.
pub fn blocker_name(id: &str) -> String {
    format!("{BLOCKER_PREFIX}{id}")
}

/// The order of the queue: the first live waiter in it is the next to be admitted.
pub const NEXT: &str = "priority DESC, ticket, id";

/// The columns `--priority` and `--supersede` added to the waiters table, and their
/// types: a table made by an older dlock gains them on first use (plain arrival order,
/// nobody superseding, for the rows already there).
pub const ADDED: [(&str, &str); 3] = [
    ("priority", "INT NOT NULL DEFAULT 0"),
    ("superseding", "BOOLEAN NOT NULL DEFAULT FALSE"),
    ("superseded_by", "TEXT NULL"),
];

/// The named lock of the waiter whose id is in column `col`.
fn wake_name_of(col: &str) -> String {
    format!("CONCAT('{WAKE_PREFIX}', {col})")
}

/// A waiter's row is live while its waiter looked within the liveness deadline, or while
/// its session holds its named lock (a waiter blocked behind another does not look).
fn waiter_named() -> String {
    format!("IS_USED_LOCK({}) IS NOT NULL", wake_name_of("id"))
}

/// The names of the tables.
#[derive(Debug, Clone)]
pub struct Names {
    /// `` `table` `` and `` `table_waiters` ``, quoted.
    pub locks: String,
    pub waiters: String,
    /// The plain names, for `information_schema`.
    pub locks_plain: String,
    pub waiters_plain: String,
}

impl Names {
    pub fn new(table: &str) -> Names {
        Names {
            locks: format!("`{table}`"),
            waiters: format!("`{table}_waiters`"),
            locks_plain: table.to_string(),
            waiters_plain: format!("{table}_waiters"),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` for both tables, one statement each: what
    /// docs/stores/mysql.md gives users who create them ahead of time.
    pub fn ddl(&self) -> [String; 2] {
        let (l, w) = (&self.locks, &self.waiters);
        [
            format!(
                "CREATE TABLE IF NOT EXISTS {l} (
  lock_key VARBINARY(512) NOT NULL PRIMARY KEY,
  token BIGINT NOT NULL DEFAULT 0,
  owner VARBINARY(255) NULL,
  depth INT NOT NULL DEFAULT 0,
  expires_at BIGINT NULL,
  holder TEXT NULL,
  last_run TEXT NULL,
  last_success TEXT NULL,
  runs_until BIGINT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {w} (
  ticket BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  lock_key VARBINARY(512) NOT NULL,
  id VARBINARY(64) NOT NULL,
  alive_until BIGINT NOT NULL,
  holder TEXT NOT NULL,
  priority INT NOT NULL DEFAULT 0,
  superseding BOOLEAN NOT NULL DEFAULT FALSE,
  superseded_by TEXT NULL,
  UNIQUE KEY by_waiter (lock_key, id),
  KEY by_arrival (lock_key, ticket)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
        ]
    }

    /// What a waiters table made by an older dlock lacks of [`ADDED`], given the columns
    /// `present`: one `ALTER TABLE` (MySQL 8 has no `ADD COLUMN IF NOT EXISTS`), `None`
    /// when nothing is missing.
    pub fn upgrade(&self, present: &[String]) -> Option<String> {
        let adds: Vec<String> = ADDED
            .iter()
            .filter(|(name, _)| !present.iter().any(|p| p.eq_ignore_ascii_case(name)))
            .map(|(name, ty)| format!("ADD COLUMN {name} {ty}"))
            .collect();
        (!adds.is_empty()).then(|| format!("ALTER TABLE {} {}", self.waiters, adds.join(", ")))
    }
}

/// What a least-privilege `account` (e.g. `'jobs'@'%'`) needs in `db` on tables made
/// ahead of time with [`Names::ddl`]: rows only, no DDL.
pub fn grants(n: &Names, db: &str, account: &str) -> String {
    format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.{} TO {account};\nGRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.{} TO {account};",
        n.locks, n.waiters
    )
}

/// Every statement's text (the client prepares each once per connection).
pub struct Sql {
    /// key → owner, token, depth, holder, left_ms (the row locked).
    pub lock_row: String,
    /// name, name, key → what `lock_row` reads, then 1 when this session holds the
    /// waiter's named lock `name` (taken now unless it held it already), whether the
    /// named lock of the holder (its `wake` field) is held, and how long ago the last
    /// lease ended (a release sets `expires_at` to its time) (the row locked).
    pub lock_row_named: String,
    /// key: creates the key's row if missing.
    pub insert_row: String,
    /// key → id, liveness left (ms), named (its session holds its named lock; a row is
    /// dead when neither), superseded (out of the line), priority of every waiter in order.
    pub queue: String,
    /// owner, ttl_ms, holder, key (the row locked).
    pub grant: String,
    /// levels added (0 or 1), ttl_ms, key (the row locked).
    pub extend: String,
    /// key, waiter.
    pub dequeue: String,
    /// key, waiter, liveness_ms, holder, priority, superseding, liveness_ms.
    pub enqueue: String,
    /// key, waiter → the holder JSON of the newer waiter that superseded it.
    pub superseded: String,
    /// key, key, waiter → the ids of the key's pending superseding waiters older than it.
    pub older_superseding: String,
    /// superseded_by (holder JSON), key, waiter: the waiter gives way, out of the line.
    pub give_way: String,
    /// key, waiter, name, name, secs, name: [`Sql::superseded`]'s answer, else a block on
    /// the named lock `name` (see `wait.rs`): what a superseding waiter blocks with.
    pub block_superseding: String,
    /// name, name, secs, name: blocks until the named lock `name` is free (taking it and
    /// letting it go at once), at most `secs`: 1 when it was released, 0 at the time
    /// limit, -1 when it was free from the start (its owner keeps none: the caller looks
    /// again on a schedule).
    pub block: String,
    /// ttl_ms, key, owner (affected rows: 1 when renewed).
    pub renew: String,
    /// key → token, left_ms.
    pub lease: String,
    /// key → 1 when held, 0 when free, no row when never used.
    pub why: String,
    /// key (the row locked): one level less.
    pub shallower: String,
    /// key: frees it (the row locked).
    pub free: String,
    /// key, owner: frees it if `owner` holds it (a grant whose answer was lost).
    pub free_if: String,
    /// left_ms, held until (ms since the epoch), key, owner (affected rows: 1 when done).
    pub linger: String,
    /// → key, owner, token, depth, holder, left_ms of every live lease, by key. Followed
    /// by ` AND lock_key IN (…)` for named keys.
    pub held: String,
    /// → key, id, holder, priority of the live waiters of the keys ` IN (…)` that
    /// follows (in line: not superseded).
    pub waiting: String,
    /// key, last run, last success (or NULL), keep_ms, last success, last run, keep_ms.
    pub record_run: String,
    /// key → last run, last success.
    pub last_runs: String,
    /// → the server's clock, ms since the epoch (a group's members end on it).
    pub now: String,
    /// token, expires_at (ms since the epoch), group JSON, key (the row locked): the key
    /// held by a group (see [`crate::backend::group`]).
    pub put_group: String,
    /// key → what `queue` reads, and the holder (JSON with the sharing asked for) of
    /// every waiter in order: what a shared or semaphore attempt reads.
    pub queued: String,
    /// key → the holder JSON of a live lease (its `wake` field names its named lock).
    pub wake: String,
}

impl Sql {
    pub fn new(n: &Names) -> Sql {
        let (l, w) = (&n.locks, &n.waiters);
        let lease_left = left("expires_at");
        let live = format!("(owner IS NOT NULL AND expires_at > {NOW_MS})");
        Sql {
            lock_row: format!(
                "SELECT owner, token, depth, holder, {lease_left} FROM {l} WHERE lock_key = ? FOR UPDATE"
            ),
            lock_row_named: lock_row_named(l, &lease_left),
            insert_row: format!(
                "INSERT INTO {l} (lock_key) VALUES (?) ON DUPLICATE KEY UPDATE lock_key = lock_key"
            ),
            queue: format!("{} FROM {w} WHERE lock_key = ? ORDER BY {NEXT}", in_line()),
            grant: format!(
                "UPDATE {l} SET token = token + 1, owner = ?, depth = 1, expires_at = {NOW_MS} + ?, holder = ? WHERE lock_key = ?"
            ),
            extend: format!(
                "UPDATE {l} SET depth = depth + ?, expires_at = GREATEST(expires_at, {NOW_MS} + ?) WHERE lock_key = ?"
            ),
            dequeue: format!("DELETE FROM {w} WHERE lock_key = ? AND id = ?"),
            enqueue: format!(
                "INSERT INTO {w} (lock_key, id, alive_until, holder, priority, superseding)
                 VALUES (?, ?, {NOW_MS} + ?, ?, ?, ?)
                 ON DUPLICATE KEY UPDATE alive_until = {NOW_MS} + ?"
            ),
            superseded: superseded(w),
            older_superseding: older_superseding(w),
            give_way: format!("UPDATE {w} SET superseded_by = ? WHERE lock_key = ? AND id = ?"),
            block_superseding: format!("SELECT IF(EXISTS({}), 1, {BLOCK_ON})", superseded(w)),
            block: format!("SELECT {BLOCK_ON}"),
            renew: format!(
                "UPDATE {l} SET expires_at = GREATEST(expires_at, {NOW_MS} + ?) WHERE lock_key = ? AND owner = ? AND {live}"
            ),
            lease: format!("SELECT token, {lease_left} FROM {l} WHERE lock_key = ?"),
            why: format!("SELECT {live} FROM {l} WHERE lock_key = ?"),
            shallower: format!("UPDATE {l} SET depth = depth - 1 WHERE lock_key = ?"),
            free: format!(
                "UPDATE {l} SET owner = NULL, depth = 0, expires_at = {NOW_MS}, holder = NULL WHERE lock_key = ?"
            ),
            free_if: format!(
                "UPDATE {l} SET owner = NULL, depth = 0, expires_at = {NOW_MS}, holder = NULL WHERE lock_key = ? AND owner = ?"
            ),
            linger: format!(
                "UPDATE {l} SET expires_at = {NOW_MS} + ?,
                   holder = JSON_SET(COALESCE(holder, '{{}}'), '$.held_until_ms', ?)
                 WHERE lock_key = ? AND owner = ? AND {live}"
            ),
            held: format!(
                "SELECT lock_key, owner, token, depth, holder, {lease_left} FROM {l} WHERE {live}"
            ),
            waiting: format!(
                "SELECT lock_key, id, holder, priority FROM {w}
                 WHERE (alive_until >= {NOW_MS} OR {}) AND superseded_by IS NULL AND lock_key IN",
                waiter_named()
            ),
            record_run: format!(
                "INSERT INTO {l} (lock_key, last_run, last_success, runs_until) VALUES (?, ?, ?, {NOW_MS} + ?)
                 ON DUPLICATE KEY UPDATE
                   last_success = COALESCE(?, IF(runs_until > {NOW_MS}, last_success, NULL)),
                   last_run = ?,
                   runs_until = {NOW_MS} + ?"
            ),
            last_runs: format!(
                "SELECT last_run, last_success FROM {l} WHERE lock_key = ? AND runs_until > {NOW_MS}"
            ),
            now: format!("SELECT {NOW_MS}"),
            put_group: format!(
                "UPDATE {l} SET token = ?, owner = '{GROUP_OWNER}', depth = 1, expires_at = ?, holder = ? WHERE lock_key = ?"
            ),
            queued: format!(
                "{}, holder FROM {w} WHERE lock_key = ? ORDER BY {NEXT}",
                in_line()
            ),
            wake: format!("SELECT holder FROM {l} WHERE lock_key = ? AND {live}"),
        }
    }
}

/// See [`Sql::block`].
const BLOCK_ON: &str = "IF(IS_USED_LOCK(?) IS NULL, -1, IF(GET_LOCK(?, ?), RELEASE_LOCK(?), 0))";

/// What `queue` and `queued` read of each waiter (see [`Sql::queue`]).
fn in_line() -> String {
    format!(
        "SELECT id, {}, {}, superseded_by IS NOT NULL, priority",
        left("alive_until"),
        waiter_named()
    )
}

/// See [`Sql::superseded`].
fn superseded(w: &str) -> String {
    format!(
        "SELECT superseded_by FROM {w} WHERE lock_key = ? AND id = ? AND superseded_by IS NOT NULL"
    )
}

/// See [`Sql::older_superseding`]: whoever came before (a lower ticket) is older.
fn older_superseding(w: &str) -> String {
    format!(
        "SELECT id FROM {w} WHERE lock_key = ? AND superseding AND superseded_by IS NULL
           AND ticket < (SELECT ticket FROM {w} WHERE lock_key = ? AND id = ?)"
    )
}

/// name: lets the caller's named lock go.
pub const UNNAME: &str = "DO RELEASE_LOCK(?)";

/// See [`Sql::lock_row_named`].
fn lock_row_named(l: &str, lease_left: &str) -> String {
    format!(
        "SELECT owner, token, depth, holder, {lease_left},
           IF(IS_USED_LOCK(?) = CONNECTION_ID(), 1, GET_LOCK(?, 0)),
           IS_USED_LOCK({}) IS NOT NULL, {NOW_MS} - COALESCE(expires_at, 0)
         FROM {l} WHERE lock_key = ? FOR UPDATE",
        wake_name_of("JSON_UNQUOTE(JSON_EXTRACT(holder, '$.wake'))")
    )
}

/// `(?, ?, …)` for `n` values.
pub fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(2 + 3 * n);
    s.push('(');
    for i in 0..n {
        s.push_str(if i == 0 { "?" } else { ", ?" });
    }
    s.push(')');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        let n = Names::new("locks");
        assert_eq!(n.waiters, "`locks_waiters`");
        assert!(n.ddl()[1].contains("`locks_waiters`"));
        assert!(grants(&n, "app", "'jobs'@'%'").contains("`app`.`locks`"));
        assert_eq!(placeholders(3), "(?, ?, ?)");
        assert_eq!(Sql::new(&n).renew.matches('?').count(), 3);
        assert_eq!(Sql::new(&n).enqueue.matches('?').count(), 7);
        assert_eq!(Sql::new(&n).block_superseding.matches('?').count(), 6);
        for (column, _) in ADDED {
            assert!(n.ddl()[1].contains(&format!("  {column} ")), "{column}");
        }
        let some = ["PRIORITY".to_string(), "superseding".to_string()];
        let alter = n.upgrade(&some).unwrap();
        assert_eq!(
            alter,
            "ALTER TABLE `locks_waiters` ADD COLUMN superseded_by TEXT NULL"
        );
        let all = ADDED.map(|(c, _)| c.to_string());
        assert_eq!(n.upgrade(&all), None);
    }
}
