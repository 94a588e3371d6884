//! `dlock` on MariaDB (the MySQL store) when things fail or are set up by hand:
//! connections killed, the server killed under a waiter (its place in the queue),
//! restarted, or frozen before the first answer, wrong passwords, an account that may not
//! run DDL, TLS. (What every store does under a killed, paused or restarted server is the
//! fault matrix, `faults.rs`.) Every error is one line that names the server and
//! never the password.

use std::time::{Duration, Instant};

use crate::support::{
    self, alive, free_port, stderr_of, text, wait_exit, wait_for, MysqlServer, Store, MY_PASSWORD,
};

/// `dlock exec job -u URL` printing its fencing token; it must succeed.
fn exec_token(url: &str) -> u64 {
    support::token_of(support::dlock().args(["exec", "job", "-u", url]))
}

/// Kills every connection of the test account but the one asking; returns how many it
/// killed. A connection that ended between the listing and its `KILL`
/// ("Unknown thread id") is not counted; any other refusal fails the test.
fn kill_connections(server: &MysqlServer) -> usize {
    let ids = server.sql(
        "SELECT GROUP_CONCAT(id) FROM information_schema.PROCESSLIST \
         WHERE user = 'dlock' AND id <> CONNECTION_ID()",
    );
    let mut killed = 0;
    for id in ids.split(',').filter(|id| id.parse::<u64>().is_ok()) {
        match server.try_sql(&format!("KILL CONNECTION {id}")) {
            Ok(_) => killed += 1,
            Err(e) if e.contains("Unknown thread id") => {}
            Err(e) => panic!("KILL CONNECTION {id}: {e}"),
        }
    }
    killed
}

#[test]
fn killed_connections_reconnect_and_the_lease_holds() {
    let mut store = Store::mysql();
    let dir = tempfile::tempdir().unwrap();
    let (mut dlock, pid) = store.hold("held", "1500ms", dir.path());
    // Every dlock connection is killed, again and again, for longer than the TTL.
    let until = Instant::now() + Duration::from_secs(3);
    let mut cuts = 0;
    while Instant::now() < until {
        cuts += usize::from(kill_connections(store.my()) > 0);
        std::thread::sleep(Duration::from_millis(300));
    }
    // dlock's connections were there to kill, and were there again once it reconnected.
    assert!(cuts >= 2, "dlock's connections were killed {cuts} times");
    assert!(alive(pid), "the command must still run: the lease held");
    assert!(store.held("held"));
    support::send_signal(pid, "TERM");
    let status = wait_exit(&mut dlock, Duration::from_secs(10)).expect("dlock ends");
    assert_eq!(status.code(), Some(143), "{}", stderr_of(dlock));
}

#[test]
fn tokens_keep_increasing_across_a_restart() {
    let mut store = Store::mysql();
    let (owner, first) = store.lock_token("t", "1m");
    let out = store
        .dlock()
        .args(["unlock", "t", "--owner", &owner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    store.my().restart();
    let (_, second) = store.lock_token("t", "1m");
    assert!(second > first, "{first} then {second}");
    // A lease taken before a crash is still there after it, on the server's clock.
    store.my().restart();
    let out = store
        .dlock()
        .args(["lock", "t", "--no-wait"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
}

#[test]
fn killed_server_during_a_wait_is_exit_69_and_the_place_lapses() {
    let mut store = Store::mysql();
    let (owner, _) = store.lock_token("w", "1m");
    let mut waiter = store
        .dlock()
        .args(["exec", "w", "--timeout", "4s", "--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let queued = wait_for(Duration::from_secs(10), || {
        store.my().sql("SELECT COUNT(*) FROM dlock_locks_waiters") == "1"
    });
    assert!(queued, "the waiter queued");
    // A waiter tries to reconnect until its --timeout (a server restarting would be back).
    store.my().kill();
    let status = wait_exit(&mut waiter, Duration::from_secs(10)).expect("the waiter gives up");
    assert_eq!(status.code(), Some(69));
    let err = stderr_of(waiter);
    let last = err.lines().last().unwrap_or_default().to_string();
    assert!(
        last.contains("mysql://") && !err.contains(MY_PASSWORD),
        "{err}"
    );
    store.my().restart();
    assert!(store.held("w"));
    let gone = wait_for(Duration::from_secs(15), || {
        store.my().sql(
            "SELECT COUNT(*) FROM dlock_locks_waiters \
             WHERE alive_until > UNIX_TIMESTAMP(NOW(3)) * 1000",
        ) == "0"
    });
    assert!(gone, "the dead waiter's place lapses");
    let out = store
        .dlock()
        .args(["unlock", "w", "--owner", &owner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_server_that_never_answers_is_exit_69_and_holds_nothing() {
    let mut store = Store::mysql();
    store.my().pause();
    let started = Instant::now();
    let out = store
        .dlock()
        .args(["lock", "frozen", "-n"])
        .output()
        .unwrap();
    let took = started.elapsed();
    store.my().resume();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("mysql://") && last.contains("no answer"),
        "{err}"
    );
    assert!(!err.contains(MY_PASSWORD), "{err}");
    assert!(!store.held("frozen"), "nothing held");
}

#[test]
fn unreachable_server_is_exit_69_in_one_line() {
    let url = format!("mysql://u:hidden-pw@127.0.0.1:{}/db", free_port());
    let out = support::dlock()
        .args(["exec", "k", "-n", "-u", &url, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("mysql://") && !err.contains("hidden-pw"),
        "{err}"
    );
}

#[test]
fn wrong_password_is_exit_69_without_the_password_and_mysql_pwd_works() {
    let mut store = Store::mysql();
    let server = store.my();
    let bad = server.url().replace(MY_PASSWORD, "wrong-secret-9");
    let out = support::dlock()
        .args(["exec", "k", "-u", &bad, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("Access denied") && err.contains("MYSQL_PWD"),
        "{err}"
    );
    assert!(
        !err.contains("wrong-secret-9") && !err.contains(MY_PASSWORD),
        "{err}"
    );
    let out = support::dlock()
        .args(["exec", "k", "-u", &server.url_without_password()])
        .args(["--", "true"])
        .env("MYSQL_PWD", MY_PASSWORD)
        .output()
        .unwrap();
    assert!(out.status.success(), "MYSQL_PWD is used: {out:?}");
    // The password reaches neither the command's argv, its DLOCK_URL, nor status --json.
    let out = support::dlock()
        .args(["exec", "k", "--", "sh", "-c"])
        .arg("tr '\\0' ' ' < /proc/$PPID/cmdline; echo; echo \"$DLOCK_URL\"; \"$DLOCK_BIN\" status --json")
        .env("DLOCK_URL", server.url())
        .env("DLOCK_BIN", support::dlock_bin())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.contains("mysql://"), "{seen}");
    assert!(!seen.contains(MY_PASSWORD), "leaks: {seen}");
}

#[test]
fn an_account_without_ddl_works_on_tables_made_ahead_of_time() {
    let mut store = Store::mysql();
    let names = dlock::backend::mysql::schema::Names::new("jobs");
    let my = store.my();
    for ddl in names.ddl() {
        my.sql(&ddl);
    }
    my.sql("CREATE USER 'worker'@'%' IDENTIFIED BY 'worker-pw'");
    my.sql(&dlock::backend::mysql::schema::grants(
        &names,
        "dlock",
        "'worker'@'%'",
    ));
    let url = format!(
        "mysql://worker:worker-pw@127.0.0.1:{}/dlock?table=jobs",
        my.port
    );
    assert_eq!(exec_token(&url), 1);
    assert_eq!(my.sql("SELECT token FROM jobs WHERE lock_key = 'job'"), "1");
    // Shared holders need nothing more: they live in the same row.
    let shared = support::token_of(support::dlock().args(["exec", "job", "--shared", "-u", &url]));
    assert_eq!(shared, 2);
    // The same account may not create tables of its own.
    let other = url.replace("table=jobs", "table=other");
    let out = support::dlock()
        .args(["exec", "job", "-u", &other, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert_eq!(text(&out.stderr).lines().count(), 1, "{out:?}");
}

/// A waiters table made by a dlock before `--priority` gains the columns on first use,
/// its rows in plain arrival order (priority 0, not superseding); an account that may not
/// add them fails in one line; tables made ahead of time with `Names::ddl` have them already.
#[test]
fn tables_from_before_priorities_are_upgraded() {
    let mut store = Store::mysql();
    let names = dlock::backend::mysql::schema::Names::new("old");
    let my = store.my();
    let mut before = names.ddl()[1].clone();
    for (column, ty) in dlock::backend::mysql::schema::ADDED {
        before = before.replace(&format!("  {column} {ty},\n"), "");
    }
    assert!(!before.contains("priority") && !before.contains("supersed"));
    my.sql(&names.ddl()[0]);
    my.sql(&before);
    my.sql("INSERT INTO old_waiters (lock_key, id, alive_until, holder) VALUES ('other', 'w', 0, '{}')");
    // An account without DDL rights is told in one line what it may not do.
    my.sql("CREATE USER 'rows'@'%' IDENTIFIED BY 'rows-pw'");
    my.sql(&dlock::backend::mysql::schema::grants(
        &names,
        "dlock",
        "'rows'@'%'",
    ));
    let rows = format!("mysql://rows:rows-pw@127.0.0.1:{}/dlock?table=old", my.port);
    let out = support::dlock()
        .args(["exec", "k", "-u", &rows, "--", "true"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(err.lines().count() == 1 && err.contains("ALTER"), "{err}");
    let url = format!("{}?table=old", my.url());
    let out = support::dlock()
        .args(["exec", "k", "-u", &url, "--priority", "7", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let columns =
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
                   AND TABLE_NAME = 'old_waiters' \
                   AND COLUMN_NAME IN ('priority', 'superseding', 'superseded_by')";
    assert_eq!(my.sql(columns), "3");
    let kept =
        "SELECT priority, superseding, superseded_by IS NULL FROM old_waiters WHERE id = 'w'";
    assert_eq!(my.sql(kept), "0\t0\t1");
}

#[test]
fn tables_are_created_on_first_use() {
    let mut store = Store::mysql();
    let url = format!("{}?table=fresh", store.my().url());
    assert_eq!(exec_token(&url), 1);
    let tables = store.my().sql("SHOW TABLES LIKE 'fresh%'");
    assert_eq!(
        tables.lines().collect::<Vec<_>>(),
        ["fresh", "fresh_waiters"]
    );
}

#[test]
fn tls_with_ssl_mode_required() {
    let dir = tempfile::tempdir().unwrap();
    let Some(pki) = support::pki(dir.path()) else {
        panic!("openssl is needed to make the test certificates (apt-get install openssl)");
    };
    let server = MysqlServer::start_tls(&pki);
    let exec = |url: &str, ca: Option<&std::path::Path>| {
        let mut c = support::dlock();
        c.args(["exec", "tls", "-u", url, "--", "true"]);
        if let Some(ca) = ca {
            c.env("DLOCK_TLS_CA", ca);
        }
        c.output().unwrap()
    };
    let url = format!("{}?ssl-mode=REQUIRED", server.url());
    let out = exec(&url, Some(&pki.ca));
    assert!(out.status.success(), "{out:?}");
    // The server refuses plain connections; a certificate dlock cannot verify is refused.
    let out = exec(&server.url(), None);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let out = exec(&url, None);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(!text(&out.stderr).contains(MY_PASSWORD), "{out:?}");
}
