//! PostgreSQL and MariaDB waiters when something gets in their way: a client frozen in a
//! transaction that holds the key's row, a waiter's own session killed by an
//! administrator, the server paused for a few seconds. Each is a reason to try again
//! within the caller's `--timeout`, never exit 69: run on both SQL stores, and all at
//! once under contending `exec` loops. Errors about a key name it.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    self, loops, pg_bin, stderr_of, text, wait_exit, wait_for, Store, MY_DB, MY_PASSWORD, MY_USER,
    PG_PASSWORD, PG_USER,
};

/// A SQL store, how its dialect and its client tools say things, and how many client
/// sessions were frozen on it.
struct Sql(Store, std::cell::Cell<u32>);

/// The application name of the client a test freezes in a transaction.
const FROZEN_APP: &str = "frozen-client";

impl Sql {
    fn postgres() -> Sql {
        Sql(Store::postgres(), Default::default())
    }

    fn mysql() -> Sql {
        Sql(Store::mysql(), Default::default())
    }

    fn is_pg(&self) -> bool {
        matches!(self.0, Store::Postgres(_))
    }

    fn try_query(&self, sql: &str) -> Result<String, String> {
        match &self.0 {
            Store::Postgres(pg) => pg.try_psql(sql),
            Store::Mysql(my) => my.try_sql(sql),
            _ => unreachable!("a SQL store"),
        }
    }

    fn query(&self, sql: &str) -> String {
        self.try_query(sql)
            .unwrap_or_else(|e| panic!("{sql:?}: {e}"))
    }

    fn count(&self, sql: &str) -> u32 {
        self.query(sql).parse().unwrap_or(0)
    }

    /// Locks `key`'s row in a transaction left open, as a frozen dlock would.
    fn lock_row(&self, key: &str) -> String {
        self.1.set(self.1.get() + 1);
        match self.is_pg() {
            true => format!("BEGIN; SELECT 1 FROM dlock_locks WHERE key = '{key}' FOR UPDATE;"),
            // Then it says so, and who it is, with a named lock (MariaDB shows neither
            // client names nor, reliably, the transactions of others).
            false => format!(
                "START TRANSACTION; SELECT 1 FROM dlock_locks WHERE lock_key = '{key}' FOR UPDATE; \
                 DO GET_LOCK('{}', 0);",
                self.frozen_name()
            ),
        }
    }

    /// The named lock the last MariaDB session takes once it holds the row.
    fn frozen_name(&self) -> String {
        format!("frozen-client-{}", self.1.get())
    }

    /// MariaDB: the sessions that wait for a row lock (blocked in `SELECT … FOR UPDATE`),
    /// the frozen client and this query left out.
    fn blocked_where(&self) -> String {
        format!(
            "FROM information_schema.PROCESSLIST WHERE INFO LIKE '%FOR UPDATE%' \
             AND ID <> CONNECTION_ID() AND ID <> COALESCE(IS_USED_LOCK('{}'), 0)",
            self.frozen_name()
        )
    }

    /// An interactive client session (`psql`, `mariadb`) reading statements from a pipe.
    fn session(&self) -> Session {
        let mut cmd = match &self.0 {
            Store::Postgres(pg) => {
                let mut c = Command::new(pg_bin("psql"));
                c.args(["-h", "127.0.0.1", "-p", &pg.port.to_string()])
                    .args(["-U", PG_USER, "-d", "postgres", "-XAtq"])
                    .env("PGPASSWORD", PG_PASSWORD)
                    .env("PGAPPNAME", FROZEN_APP);
                c
            }
            Store::Mysql(my) => {
                let mut c = Command::new("mariadb");
                c.arg("--no-defaults")
                    .args(["-h", "127.0.0.1", "-P", &my.port.to_string()])
                    .args(["-u", MY_USER, "-D", MY_DB, "-N", "-B"])
                    .env("MYSQL_PWD", MY_PASSWORD);
                c
            }
            _ => unreachable!("a SQL store"),
        };
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("a SQL client");
        Session(child, log)
    }

    /// A session opened that locks `key`'s row and sits in its transaction, seen so by
    /// the server.
    fn frozen_client(&self, key: &str) -> Session {
        let mut session = self.session();
        session.send(&self.lock_row(key));
        let frozen = wait_for(Duration::from_secs(10), || self.frozen() == 1);
        assert!(
            frozen,
            "the client holds the row: {} ({})",
            self.sessions(),
            session.said()
        );
        session
    }

    /// How many client sessions sit idle in a transaction that locked a row.
    fn frozen(&self) -> u32 {
        let sql = match self.is_pg() {
            true => {
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'frozen-client' \
                     AND state = 'idle in transaction' AND backend_xid IS NOT NULL"
                    .to_string()
            }
            false => format!("SELECT IS_USED_LOCK('{}') IS NOT NULL", self.frozen_name()),
        };
        self.count(&sql)
    }

    /// The server's sessions, for a failure's message.
    fn sessions(&self) -> String {
        let sql = match self.is_pg() {
            true => {
                "SELECT application_name, state, wait_event_type, backend_xid, query \
                     FROM pg_stat_activity WHERE backend_type = 'client backend'"
            }
            false => "SELECT ID, COMMAND, STATE, INFO FROM information_schema.PROCESSLIST",
        };
        self.try_query(sql).unwrap_or_else(|e| e)
    }

    /// How many dlock sessions wait for a row lock.
    fn blocked(&self) -> u32 {
        let sql = match self.is_pg() {
            true => "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dlock' \
                     AND wait_event_type = 'Lock'"
                .to_string(),
            false => format!("SELECT COUNT(*) {}", self.blocked_where()),
        };
        self.count(&sql)
    }

    /// Ends every dlock session that waits for a row lock, as an administrator would
    /// (`pg_terminate_backend`, `KILL`): how many the server ended.
    fn kill_blocked(&self) -> u32 {
        if self.is_pg() {
            return self.count(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = 'dlock' AND wait_event_type = 'Lock'",
            );
        }
        let ids = self.query(&format!("SELECT GROUP_CONCAT(ID) {}", self.blocked_where()));
        let ids = ids.split(',').filter(|id| id.parse::<u64>().is_ok());
        let killed = ids.filter(|id| self.try_query(&format!("KILL CONNECTION {id}")).is_ok());
        killed.count() as u32
    }

    /// Kills dlock sessions waiting for a row lock until at least one was ended.
    fn kill_a_blocked_waiter(&self) -> u32 {
        let mut killed = 0;
        let hit = wait_for(Duration::from_secs(10), || {
            killed += self.kill_blocked();
            killed > 0
        });
        assert!(hit, "no waiter's session was ended: {}", self.sessions());
        killed
    }

    /// How many waiters have a live place in `key`'s line.
    fn queued(&self, key: &str) -> u32 {
        self.count(&match self.is_pg() {
            true => format!(
                "SELECT count(*) FROM dlock_locks_waiters WHERE key = '{key}' \
                 AND alive_until > clock_timestamp()"
            ),
            false => format!(
                "SELECT COUNT(*) FROM dlock_locks_waiters WHERE lock_key = '{key}' \
                 AND alive_until > UNIX_TIMESTAMP(NOW(3)) * 1000"
            ),
        })
    }

    fn pause(&mut self) {
        match &mut self.0 {
            Store::Postgres(pg) => pg.pause(),
            Store::Mysql(my) => my.pause(),
            _ => unreachable!("a SQL store"),
        }
    }

    fn resume(&mut self) {
        match &mut self.0 {
            Store::Postgres(pg) => pg.resume(),
            Store::Mysql(my) => my.resume(),
            _ => unreachable!("a SQL store"),
        }
    }

    /// `dlock ARGS` with its stderr piped.
    fn spawn(&self, args: &[&str]) -> Child {
        let mut cmd = self.0.dlock();
        cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.0.dlock().args(args).output().unwrap()
    }
}

/// A client session, and where its errors go; dropping it kills the client, and the
/// server ends its transaction.
struct Session(Child, tempfile::NamedTempFile);

impl Session {
    /// How the client fares: its exit status if it ended, and its errors.
    fn said(&mut self) -> String {
        let status = self.0.try_wait().ok().flatten();
        let err = std::fs::read_to_string(self.1.path()).unwrap_or_default();
        format!("{status:?}: {err}")
    }

    fn send(&mut self, sql: &str) {
        let stdin = self.0.stdin.as_mut().expect("piped");
        writeln!(stdin, "{sql}")
            .and_then(|()| stdin.flush())
            .unwrap();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The waiter has ended with exit 0 within `limit`.
fn assert_ran(waiter: &mut Child, limit: Duration) {
    let status = wait_exit(waiter, limit);
    let err = status.is_some().then(|| stderr_of_ref(waiter));
    assert_eq!(
        status.map(|s| s.code()),
        Some(Some(0)),
        "the waiter must run: {err:?}"
    );
}

/// The waiter is still waiting after `limit` (it has not given up).
fn assert_waits(waiter: &mut Child, limit: Duration) {
    if let Some(status) = wait_exit(waiter, limit) {
        panic!("the waiter gave up: {status}: {}", stderr_of_ref(waiter));
    }
}

fn stderr_of_ref(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
    }
    err
}

fn a_waiter_behind_a_frozen_client_runs_when_it_is_gone(db: Sql) {
    let out = db.run(&["exec", "k", "--", "true"]);
    assert!(out.status.success(), "the row is made: {out:?}");
    let mut session = db.frozen_client("k");
    let mut waiter = db.spawn(&["exec", "k", "--timeout", "20s", "--", "true"]);
    let met = wait_for(Duration::from_secs(10), || db.blocked() > 0);
    assert!(met, "the waiter meets the row lock: {}", db.sessions());
    // Longer than the server's lock-wait limit and the client's own time limit.
    assert_waits(&mut waiter, Duration::from_secs(5));
    let ended = Instant::now();
    session.send("COMMIT;");
    assert_ran(&mut waiter, Duration::from_secs(10));
    assert!(
        ended.elapsed() < Duration::from_secs(5),
        "{:?}",
        ended.elapsed()
    );
}

#[test]
fn postgres_a_waiter_behind_a_frozen_client_runs_when_it_is_gone() {
    a_waiter_behind_a_frozen_client_runs_when_it_is_gone(Sql::postgres());
}

#[test]
fn mysql_a_waiter_behind_a_frozen_client_runs_when_it_is_gone() {
    a_waiter_behind_a_frozen_client_runs_when_it_is_gone(Sql::mysql());
}

fn a_waiter_whose_session_is_killed_keeps_waiting_and_runs(db: Sql) {
    let (owner, _) = db.0.lock_token("k", "1m");
    let mut waiter = db.spawn(&["exec", "k", "--timeout", "30s", "--", "true"]);
    let queued = wait_for(Duration::from_secs(10), || db.queued("k") == 1);
    assert!(queued, "the waiter queued");
    // A client in the row's way keeps the waiter inside its request while it is killed.
    let session = db.frozen_client("k");
    db.kill_a_blocked_waiter();
    drop(session);
    assert_waits(&mut waiter, Duration::from_secs(1));
    let back = wait_for(Duration::from_secs(10), || db.queued("k") == 1);
    assert!(back, "the waiter is in line again");
    let out = db.run(&["unlock", "k", "--owner", &owner]);
    assert!(out.status.success(), "{out:?}");
    assert_ran(&mut waiter, Duration::from_secs(10));
}

#[test]
fn postgres_a_waiter_whose_session_is_killed_keeps_waiting_and_runs() {
    a_waiter_whose_session_is_killed_keeps_waiting_and_runs(Sql::postgres());
}

#[test]
fn mysql_a_waiter_whose_session_is_killed_keeps_waiting_and_runs() {
    a_waiter_whose_session_is_killed_keeps_waiting_and_runs(Sql::mysql());
}

fn a_waiter_rides_out_a_paused_server(mut db: Sql) {
    let (owner, _) = db.0.lock_token("k", "1m");
    let mut waiter = db.spawn(&["exec", "k", "--timeout", "30s", "--", "true"]);
    let queued = wait_for(Duration::from_secs(10), || db.queued("k") == 1);
    assert!(queued, "the waiter queued");
    db.pause();
    // Longer than a heartbeat and a request's time limit together.
    let gave_up = wait_exit(&mut waiter, Duration::from_secs(5));
    db.resume();
    if let Some(status) = gave_up {
        panic!("the waiter gave up: {status}: {}", stderr_of(waiter));
    }
    let out = db.run(&["unlock", "k", "--owner", &owner]);
    assert!(out.status.success(), "{out:?}");
    assert_ran(&mut waiter, Duration::from_secs(15));
}

#[test]
fn postgres_a_waiter_rides_out_a_paused_server() {
    a_waiter_rides_out_a_paused_server(Sql::postgres());
}

#[test]
fn mysql_a_waiter_rides_out_a_paused_server() {
    a_waiter_rides_out_a_paused_server(Sql::mysql());
}

/// Four `exec` loops contend for one key while, twice, a client freezes in a transaction
/// holding its row (the first time it commits, the second it is killed) and the waiters'
/// sessions are killed: every `exec` exits 0, no two commands overlap, and tokens grow.
fn contending_execs_ride_out_frozen_clients_and_killed_sessions(db: Sql) {
    let (procs, rounds) = (4, 10);
    let out = db.run(&["exec", "contended", "--", "true"]);
    assert!(out.status.success(), "the row is made: {out:?}");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let loop_script = format!(
        "for i in $(seq {rounds}); do '{}' exec contended --ttl 3s --timeout 30s -- sh -c {} || exit $?; done",
        support::dlock_bin().display(),
        loops::quoted(&loops::section(&log, "0.05"))
    );
    let mut loops: Vec<Child> = (0..procs)
        .map(|_| db.0.shell(&loop_script).spawn().unwrap())
        .collect();
    let started = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.lines().count() >= 4)
    });
    assert!(started, "the loops run");
    let mut killed = 0;
    // One freeze right after the other: the loops are still running at the second.
    for commit in [true, false] {
        let mut session = db.frozen_client("contended");
        let frozen_at = Instant::now();
        killed += db.kill_a_blocked_waiter();
        // The client sits a few seconds (a blocked waiter's session is killed again).
        wait_for(Duration::from_secs(3), || {
            killed += db.kill_blocked();
            frozen_at.elapsed() >= Duration::from_secs(3)
        });
        match commit {
            true => session.send("COMMIT;"),
            false => drop(session),
        }
    }
    assert!(killed > 0);
    for child in &mut loops {
        let status = wait_exit(child, Duration::from_secs(60)).expect("the loop ends");
        assert!(status.success(), "a loop failed: {status}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), procs * rounds * 2, "{text}");
    loops::check_marks(&text, loops::Unended::Overlap);
}

#[test]
fn postgres_contending_execs_ride_out_frozen_clients_and_killed_sessions() {
    contending_execs_ride_out_frozen_clients_and_killed_sessions(Sql::postgres());
}

#[test]
fn mysql_contending_execs_ride_out_frozen_clients_and_killed_sessions() {
    contending_execs_ride_out_frozen_clients_and_killed_sessions(Sql::mysql());
}

/// A failure about a key names it and the server, in one line; the key's counter at its
/// end is refused, not wrapped.
fn an_error_about_a_key_names_it(db: Sql) {
    let out = db.run(&["exec", "big", "--", "true"]);
    assert!(out.status.success(), "the row is made: {out:?}");
    let column = if db.is_pg() { "key" } else { "lock_key" };
    db.query(&format!(
        "UPDATE dlock_locks SET token = 9223372036854775807 WHERE {column} = 'big'"
    ));
    let out = db.run(&["exec", "big", "--", "true"]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let err = text(&out.stderr);
    let scheme = if db.is_pg() {
        "postgres://"
    } else {
        "mysql://"
    };
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("lock 'big' on {scheme}")), "{err}");
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn postgres_an_error_about_a_key_names_it() {
    an_error_about_a_key_names_it(Sql::postgres());
}

#[test]
fn mysql_an_error_about_a_key_names_it() {
    an_error_about_a_key_names_it(Sql::mysql());
}

#[test]
fn postgres_a_missing_password_is_said_to_be_required() {
    let db = Sql::postgres();
    let Store::Postgres(server) = &db.0 else {
        unreachable!()
    };
    let out = support::exec_true(&server.url_without_password())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("wants a password"), "{err}");
    assert!(err.contains("PGPASSWORD"), "{err}");
}
