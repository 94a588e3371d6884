//! The two tables, and every statement dlock sends, as text built once from their names.
//!
//! * `<table>`: one row per key, kept forever once created so that its fencing counter
//!   (`token`) is never reset: owner, depth, expiry on the server's clock, holder (JSON),
//!   and the last-run record. A free key has `owner` NULL; an expired lease is free.
//! * `<table>_waiters`: the queue, one row per waiting acquisition, ordered by [`NEXT`]:
//!   `priority` (`--priority`, highest first), then `ticket` (arrival; ordering only: a
//!   repeated or skipped ticket costs no safety), each with a liveness deadline that the
//!   waiter refreshes as it looks again.
//!
//! Every change to a key's lease or queue first locks its row (`FOR UPDATE`, or the
//! `UPDATE` itself): the row lock serializes acquirers, renewals and releases of one key.
//!
//! Who is next is decided here once, by [`NEXT`] over the live waiters ([`line`]): the
//! attempt's head, the one [`wake`] notifies, the positions and `status` all use it. A
//! hand-off notifies only that head, on its own channel ([`waiter_channel`]): the
//! waiters behind it sleep on and send nothing. The statement that picks the head runs
//! after the key's row is locked (a later statement of the same transaction, or one
//! pipelined behind the `UPDATE` that locked it), so that it sees every waiter that
//! queued before: a waiter queued by an attempt that held the row cannot be missed.

use tokio_postgres::{Client, Statement};

/// Milliseconds left until `col`, on the server's clock (0 when past or NULL).
fn left(col: &str) -> String {
    format!("COALESCE(GREATEST(0, floor(extract(epoch FROM ({col} - clock_timestamp())) * 1000)), 0)::bigint")
}

/// `clock_timestamp()` plus `$n` milliseconds.
fn later(n: u8) -> String {
    format!("clock_timestamp() + ${n}::bigint * interval '1 millisecond'")
}

/// The names of the tables and of the notification channel.
#[derive(Debug, Clone)]
pub struct Names {
    /// `"schema"."table"` or `"table"`.
    pub locks: String,
    pub waiters: String,
    /// The LISTEN/NOTIFY channel of this table: one per table and database.
    pub channel: String,
    /// The plain names, for `to_regclass`.
    pub locks_plain: String,
    pub waiters_plain: String,
}

impl Names {
    pub fn new(schema: Option<&str>, table: &str) -> Names {
        let qualify = |t: &str| match schema {
            Some(s) => (format!("\"{s}\".\"{t}\""), format!("{s}.{t}")),
            None => (format!("\"{t}\""), t.to_string()),
        };
        let (locks, locks_plain) = qualify(table);
        let (waiters, waiters_plain) = qualify(&format!("{table}_waiters"));
        Names {
            locks,
            waiters,
            channel: locks_plain.clone(),
            locks_plain,
            waiters_plain,
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` for both tables: what docs/stores/postgres.md gives users
    /// who create them ahead of time.
    pub fn ddl(&self) -> String {
        let (l, w) = (&self.locks, &self.waiters);
        let upgrade = self.upgrade();
        format!(
            "CREATE TABLE IF NOT EXISTS {l} (
  key text PRIMARY KEY,
  token bigint NOT NULL DEFAULT 0,
  owner text,
  depth integer NOT NULL DEFAULT 0,
  expires_at timestamptz,
  holder text,
  last_run text,
  last_success text,
  runs_until timestamptz
);
CREATE TABLE IF NOT EXISTS {w} (
  key text NOT NULL,
  id text NOT NULL,
  ticket bigint GENERATED ALWAYS AS IDENTITY,
  alive_until timestamptz NOT NULL,
  holder text NOT NULL,
  priority integer NOT NULL DEFAULT 0,
  superseding boolean NOT NULL DEFAULT false,
  superseded_by text,
  PRIMARY KEY (key, id)
);
{upgrade}"
        )
    }

    /// What a waiters table made by an older dlock lacks: the column `--priority` orders
    /// by (plain arrival order for the rows already there), and the two of `--supersede`.
    pub fn upgrade(&self) -> String {
        let w = &self.waiters;
        format!(
            "ALTER TABLE {w} ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS superseding boolean NOT NULL DEFAULT false,
  ADD COLUMN IF NOT EXISTS superseded_by text;"
        )
    }
}

/// What a least-privilege `role` needs on tables made ahead of time with [`Names::ddl`]:
/// rows only, no DDL (`LISTEN`/`NOTIFY` need no grant).
pub fn grants(n: &Names, role: &str) -> String {
    let schema = match n.locks.split_once('.') {
        Some((schema, _)) => format!("GRANT USAGE ON SCHEMA {schema} TO {role};\n"),
        None => String::new(),
    };
    format!(
        "{schema}GRANT SELECT, INSERT, UPDATE, DELETE ON {}, {} TO {role};",
        n.locks, n.waiters
    )
}

/// Every statement, prepared once per connection.
pub struct Prepared {
    /// $1 key → owner, token, depth, holder, live, left_ms (the row locked).
    pub lock_row: Statement,
    /// $1 key: creates the key's row if missing.
    pub insert_row: Statement,
    /// $1 key → pruned, the head's id (NULL: none), its liveness left (ms).
    pub queue: Statement,
    /// $1 key, $2 owner, $3 ttl_ms, $4 holder, $5 waiter, $6 channel, $7 payload → token.
    pub grant: Statement,
    /// $1 key, $2 ttl_ms, $3 waiter, $4 deeper (bool) → token, depth, left_ms.
    pub extend: Statement,
    /// $1 key, $2 waiter, $3 liveness_ms, $4 holder, $5 priority, $6 superseding.
    pub enqueue: Statement,
    /// $1 key, $2 waiter, $3 holder: the key's older pending superseding waiter gives way,
    /// woken on its channel → how many did. Only an older one: a waiter that looks again
    /// after a newer one marked it (both waited on the row lock) cannot turn the tables.
    pub supersede: Statement,
    /// $1 key, $2 waiter → the holder of the waiter that superseded it, its row gone.
    pub superseded: Statement,
    /// $1 channel, $2 payload, $3 key: wakes the key's head, tells the table's channel.
    pub notify: Statement,
    /// $1 key, $2 waiter → its 1-based place in the live queue (NULL: not in it), how
    /// many wait.
    pub place: Statement,
    /// $1 key, $2 channel, $3 payload: when the key is free, wakes its head and tells the
    /// table's channel (run after the statement that locked the row, to see every waiter).
    pub wake_free: Statement,
    /// $1 key, $2 owner, $3 ttl_ms → token, left_ms.
    pub renew: Statement,
    /// $1 key → live (NULL when no row).
    pub why: Statement,
    /// $1 key, $2 owner, $3 one level (bool) → depth (then `wake_free`).
    pub release: Statement,
    /// $1 key, $2 channel, $3 payload → previous owner (the row locked first by `lock_row`).
    pub force: Statement,
    /// $1 key, $2 waiter, $3 owner: out of the line, a lost grant freed (the row locked
    /// first; then `wake_free`).
    pub leave: Statement,
    /// $1 keys → key, owner, token, depth, holder, left_ms of live leases.
    pub held: Statement,
    /// → the same for every live lease, by key.
    pub held_all: Statement,
    /// $1 keys → key, id, holder, priority of live waiters in order.
    pub waiting: Statement,
    /// $1 key, $2 last run, $3 last success (or NULL), $4 keep_ms.
    pub record_run: Statement,
    /// $1 key → last run, last success.
    pub last_runs: Statement,
    /// $1 key, $2 owner, $3 ttl_ms, $4 held until (ms since the epoch) → token: the
    /// expiry set to what is left of a hold (shortened too), the holder marked.
    pub linger: Statement,
    /// `lock_row`, and the server's now in ms since the epoch (a group's clock).
    pub group_row: Statement,
    /// `queue`, and the holder JSON of each live waiter, in order (their sharing).
    pub queue_sharing: Statement,
    /// $1 key, $2 owner (NULL: free), $3 token, $4 expiry (ms since the epoch), $5 holder,
    /// $6 waiter to dequeue (or NULL), $7 channel, $8 payload (NULL: none) → token.
    pub group_write: Statement,
}

impl Prepared {
    /// Prepares every statement on `client` (pipelined: one round trip).
    pub async fn new(
        client: &Client,
        n: &Names,
    ) -> std::result::Result<Prepared, tokio_postgres::Error> {
        let texts = [acquiring(n), holding(n), reading(n), grouping(n)].concat();
        let prepared =
            futures_util::future::try_join_all(texts.iter().map(|t| client.prepare(t))).await?;
        let mut s = prepared.into_iter();
        let mut next = || s.next().expect("one statement per text");
        // In the order of the texts of `acquiring`, `holding`, `reading` and `grouping`.
        Ok(Prepared {
            lock_row: next(),
            insert_row: next(),
            queue: next(),
            grant: next(),
            extend: next(),
            enqueue: next(),
            supersede: next(),
            superseded: next(),
            notify: next(),
            place: next(),
            wake_free: next(),
            renew: next(),
            why: next(),
            release: next(),
            force: next(),
            leave: next(),
            linger: next(),
            held: next(),
            held_all: next(),
            waiting: next(),
            record_run: next(),
            last_runs: next(),
            group_row: next(),
            queue_sharing: next(),
            group_write: next(),
        })
    }
}

/// A lease is live while it has an owner and its expiry is ahead on the server's clock.
const LIVE: &str = "(owner IS NOT NULL AND expires_at > clock_timestamp())";

/// The order of the queue: the first live waiter in it is the next to be admitted.
pub const NEXT: &str = "priority DESC, ticket, id";

/// The live waiters of the key in parameter `$k`, in no order (add `ORDER BY` [`NEXT`]).
fn line(w: &str, k: u8) -> String {
    format!("SELECT id, priority, ticket, alive_until, holder FROM {w} WHERE key = ${k} AND alive_until >= clock_timestamp() AND superseded_by IS NULL")
}

/// The prefix of a waiter's own notification channel; the rest is its id.
const WAITER_CHANNEL: &str = "dlock_w_";

/// The channel only the waiter `id` listens to (ids are hex digits: no quoting needed
/// beyond the double quotes, and well under the 63 bytes of a channel name).
pub fn waiter_channel(id: &str) -> String {
    format!("{WAITER_CHANNEL}{id}")
}

/// The payload a waiter is woken with: `W:` and its id.
pub fn waiter_payload(id: &str) -> String {
    format!("W:{id}")
}

/// An expression that wakes the head of the key in `$k`'s queue (one notification on
/// the head's own channel, nothing when the queue is empty) and counts it.
fn wake(w: &str, k: u8) -> String {
    format!(
        "(SELECT count(pg_notify('{WAITER_CHANNEL}' || id, 'W:' || id)) FROM ({} ORDER BY {NEXT} LIMIT 1) head)",
        line(w, k)
    )
}

/// The statements of an attempt: the row, the queue, a grant or a re-entry.
fn acquiring(n: &Names) -> Vec<String> {
    let (l, w) = (&n.locks, &n.waiters);
    let live = LIVE;
    let lease_left = left("expires_at");
    vec![
        format!("SELECT owner, token, depth, holder, {live} AS live, {lease_left} FROM {l} WHERE key = $1 FOR UPDATE"),
        format!("INSERT INTO {l} (key) VALUES ($1) ON CONFLICT (key) DO NOTHING"),
        format!(
            "WITH dead AS (DELETE FROM {w} WHERE key = $1 AND alive_until < clock_timestamp() RETURNING 1),
             head AS ({} ORDER BY {NEXT} LIMIT 1)
             SELECT (SELECT count(*) FROM dead)::bigint, (SELECT id FROM head),
                    COALESCE((SELECT {} FROM head), 0)::bigint",
            line(w, 1),
            left("alive_until")
        ),
        format!(
            "WITH g AS (UPDATE {l} SET token = token + 1, owner = $2, depth = 1, expires_at = {}, holder = $4
                        WHERE key = $1 RETURNING token),
             d AS (DELETE FROM {w} WHERE key = $1 AND id = $5)
             SELECT token, pg_notify($6, $7)::text FROM g",
            later(3)
        ),
        format!(
            "WITH u AS (UPDATE {l} SET depth = depth + CASE WHEN $4 THEN 1 ELSE 0 END,
                                       expires_at = GREATEST(expires_at, {})
                        WHERE key = $1 RETURNING token, depth, {lease_left} AS left_ms),
             d AS (DELETE FROM {w} WHERE key = $1 AND id = $3)
             SELECT token, depth, left_ms FROM u",
            later(2)
        ),
        format!(
            "INSERT INTO {w} (key, id, alive_until, holder, priority, superseding)
             VALUES ($1, $2, {}, $4, $5, $6)
             ON CONFLICT (key, id) DO UPDATE SET alive_until = EXCLUDED.alive_until",
            later(3)
        ),
        format!(
            "WITH s AS (UPDATE {w} SET superseded_by = $3 WHERE key = $1 AND id <> $2 AND superseding
                          AND superseded_by IS NULL AND alive_until >= clock_timestamp()
                          AND ticket < (SELECT ticket FROM {w} WHERE key = $1 AND id = $2)
                        RETURNING id)
             SELECT count(pg_notify('{WAITER_CHANNEL}' || id, 'W:' || id)) FROM s"
        ),
        format!(
            "DELETE FROM {w} WHERE key = $1 AND id = $2 AND superseded_by IS NOT NULL
             RETURNING superseded_by"
        ),
        format!("SELECT {}, pg_notify($1, $2)::text", wake(w, 3)),
        format!(
            "SELECT (SELECT pos FROM (SELECT id, row_number() OVER (ORDER BY {NEXT}) AS pos FROM ({}) l) q
                     WHERE q.id = $2),
                    (SELECT count(*) FROM ({}) l)",
            line(w, 1),
            line(w, 1)
        ),
        format!(
            "SELECT {}, pg_notify($2, $3)::text WHERE NOT EXISTS (SELECT 1 FROM {l} WHERE key = $1 AND {live})",
            wake(w, 1)
        ),
    ]
}

/// The statements of a holder: renew, release (or force), leave the queue, linger.
fn holding(n: &Names) -> Vec<String> {
    let (l, w) = (&n.locks, &n.waiters);
    let live = LIVE;
    let lease_left = left("expires_at");
    vec![
        format!(
            "UPDATE {l} SET expires_at = GREATEST(expires_at, {})
             WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
             RETURNING token, {lease_left}",
            later(3)
        ),
        format!("SELECT {live} FROM {l} WHERE key = $1"),
        format!(
            "UPDATE {l} SET
               depth = CASE WHEN $3 AND depth > 1 THEN depth - 1 ELSE 0 END,
               owner = CASE WHEN $3 AND depth > 1 THEN owner END,
               expires_at = CASE WHEN $3 AND depth > 1 THEN expires_at END,
               holder = CASE WHEN $3 AND depth > 1 THEN holder END
             WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
             RETURNING depth"
        ),
        format!(
            "WITH old AS (SELECT owner FROM {l} WHERE key = $1 AND {live}),
             u AS (UPDATE {l} SET owner = NULL, depth = 0, expires_at = NULL, holder = NULL WHERE key = $1)
             SELECT owner, pg_notify($2, $3)::text, {} FROM old",
            wake(w, 1)
        ),
        format!(
            "WITH gone AS (DELETE FROM {w} WHERE key = $1 AND id = $2 RETURNING 1),
             freed AS (UPDATE {l} SET owner = NULL, depth = 0, expires_at = NULL, holder = NULL
                       WHERE key = $1 AND owner = $3 RETURNING 1)
             SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM freed)"
        ),
        format!(
            "UPDATE {l} SET expires_at = {},
               holder = (holder::jsonb || jsonb_build_object('held_until_ms', $4::bigint))::text
             WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
             RETURNING token",
            later(3)
        ),
    ]
}

/// The statements of `dlock status` and of the run records.
fn reading(n: &Names) -> Vec<String> {
    let (l, w) = (&n.locks, &n.waiters);
    let live = LIVE;
    let lease_left = left("expires_at");
    vec![
        format!("SELECT key, owner, token, depth, holder, {lease_left} FROM {l} WHERE key = ANY($1) AND {live}"),
        format!("SELECT key, owner, token, depth, holder, {lease_left} FROM {l} WHERE {live} ORDER BY key"),
        format!("SELECT key, id, holder, priority FROM {w} WHERE key = ANY($1) AND alive_until >= clock_timestamp() AND superseded_by IS NULL ORDER BY key, {NEXT}"),
        format!(
            "INSERT INTO {l} (key, last_run, last_success, runs_until) VALUES ($1, $2, $3, {})
             ON CONFLICT (key) DO UPDATE SET last_run = EXCLUDED.last_run,
               last_success = COALESCE(EXCLUDED.last_success,
                 CASE WHEN {l}.runs_until > clock_timestamp() THEN {l}.last_success END),
               runs_until = EXCLUDED.runs_until",
            later(4)
        ),
        format!("SELECT last_run, last_success FROM {l} WHERE key = $1 AND runs_until > clock_timestamp()"),
    ]
}

/// The statements of shared and semaphore holders (see `shared.rs`): the group travels
/// in the row's `holder`, so the tables are the same.
fn grouping(n: &Names) -> Vec<String> {
    let (l, w) = (&n.locks, &n.waiters);
    let live = LIVE;
    let lease_left = left("expires_at");
    vec![
        format!(
            "SELECT owner, token, depth, holder, {live} AS live, {lease_left},
                    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
             FROM {l} WHERE key = $1 FOR UPDATE"
        ),
        format!(
            "WITH dead AS (DELETE FROM {w} WHERE key = $1 AND alive_until < clock_timestamp() RETURNING 1),
             live AS ({})
             SELECT (SELECT count(*) FROM dead)::bigint,
                    COALESCE((SELECT array_agg(id ORDER BY {NEXT}) FROM live), '{{}}'::text[]),
                    COALESCE((SELECT {} FROM live ORDER BY {NEXT} LIMIT 1), 0)::bigint,
                    COALESCE((SELECT array_agg(holder ORDER BY {NEXT}) FROM live), '{{}}'::text[])",
            line(w, 1),
            left("alive_until")
        ),
        format!(
            "WITH u AS (UPDATE {l} SET owner = $2, token = GREATEST(token, $3::bigint),
                          depth = CASE WHEN $2::text IS NULL THEN 0 ELSE 1 END,
                          expires_at = CASE WHEN $2::text IS NULL THEN NULL
                                       ELSE to_timestamp($4::bigint / 1000.0::float8) END,
                          holder = $5
                        WHERE key = $1 RETURNING token),
             d AS (DELETE FROM {w} WHERE key = $1 AND id = $6)
             SELECT token, CASE WHEN $8::text IS NOT NULL THEN pg_notify($7, $8)::text END,
                    CASE WHEN left($8::text, 1) = 'R' THEN {} END FROM u",
            wake(w, 1)
        ),
    ]
}

/// Creates the tables unless both exist with every column (a waiters table from an older
/// dlock gains `priority`): a role that may not run DDL works with tables created or
/// upgraded ahead of time. Two first users racing on `CREATE TABLE IF NOT EXISTS` can
/// collide in the catalog; the loser looks again.
pub async fn ensure_tables(
    client: &Client,
    n: &Names,
) -> std::result::Result<(), tokio_postgres::Error> {
    let mut last = None;
    for _ in 0..3 {
        let row = client
            .query_one(
                "SELECT to_regclass($1)::text, to_regclass($2)::text,
                        (SELECT count(*) = 3 FROM pg_attribute WHERE attrelid = to_regclass($2)
                         AND attname IN ('priority', 'superseding', 'superseded_by')
                         AND NOT attisdropped)",
                &[&n.locks_plain, &n.waiters_plain],
            )
            .await?;
        let (a, b): (Option<String>, Option<String>) = (row.get(0), row.get(1));
        if a.is_some() && b.is_some() && row.get::<_, bool>(2) {
            return Ok(());
        }
        match client.batch_execute(&n.ddl()).await {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("three tries"))
}

/// The wake-up payload: `R` (released: waiters look again) or `T` (taken: only watchers
/// care), a colon, and the key; a key too long for a payload is left out, which wakes
/// every listener of the table.
pub fn payload(kind: char, key: &str) -> String {
    if key.len() > 7000 {
        format!("{kind}:")
    } else {
        format!("{kind}:{key}")
    }
}
