//! Application locks on MySQL/MariaDB: `mysql://…?lock=get_lock`, where dlock and the
//! `mariadb` client (standing for any application) take the same `GET_LOCK` name and exclude
//! each other both ways; the holder's session killed by an administrator, or the server
//! paused past the bound, kills CMD; 8 mixed loops never overlap.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{
    self, exec_on, loops, stderr_of, wait_exit, wait_for, MysqlServer, MY_DB, MY_PASSWORD, MY_USER,
};

fn get_lock(my: &MysqlServer) -> String {
    format!("{}?lock=get_lock", my.url())
}

/// A `mariadb` client session running `sql`, as an application would.
fn mariadb(my: &MysqlServer, sql: &str) -> Command {
    let mut c = Command::new("mariadb");
    c.arg("--no-defaults")
        .args(["-h", "127.0.0.1", "-P", &my.port.to_string()])
        .args(["-u", MY_USER, "-D", MY_DB, "-N", "-B", "-e", sql])
        .env("MYSQL_PWD", MY_PASSWORD)
        .stdin(Stdio::null());
    c
}

fn used(my: &MysqlServer, name: &str) -> bool {
    my.sql(&format!("SELECT IS_USED_LOCK('{name}') IS NOT NULL")) == "1"
}

/// A `mariadb` session that holds `name` until [`end_sleep`] ends its sleep.
fn holding(my: &MysqlServer, name: &str) -> Child {
    let sql = format!("SELECT GET_LOCK('{name}', 0); SELECT SLEEP(600)");
    let child = mariadb(my, &sql).stdout(Stdio::null()).spawn().unwrap();
    assert!(wait_for(Duration::from_secs(10), || used(my, name)));
    child
}

/// Ends the sleep of the session holding `name`: its client then exits, which
/// releases the lock.
fn end_sleep(my: &MysqlServer, name: &str) {
    let id = my.sql(&format!("SELECT IS_USED_LOCK('{name}')"));
    my.sql(&format!("KILL QUERY {id}"));
}

#[test]
fn mariadb_holds_then_dlock_waits_and_runs_after() {
    let my = MysqlServer::start();
    let url = get_lock(&my);
    let dir = tempfile::tempdir().unwrap();
    let mut holder = holding(&my, "nightly");
    let st = exec_on(&url, &["-n", "nightly", "--", "true"])
        .output()
        .unwrap();
    let err = support::text(&st.stderr);
    assert_eq!(st.status.code(), Some(75), "{err}");
    assert!(
        err.contains("'nightly'") && err.contains("foreign"),
        "{err}"
    );
    let ran = dir.path().join("ran");
    let mut waiter = exec_on(&url, &["nightly", "--", "touch", ran.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        my.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT GET_LOCK(%'") == "1"
    }));
    assert!(!ran.exists());
    end_sleep(&my, "nightly");
    holder.wait().unwrap();
    let st = wait_exit(&mut waiter, Duration::from_secs(10)).expect("dlock ran after");
    assert!(st.success(), "{}", stderr_of(waiter));
    assert!(ran.exists());
}

#[test]
fn dlock_holds_then_get_lock_fails_and_its_wait_follows() {
    let my = MysqlServer::start();
    let url = get_lock(&my);
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    std::fs::write(&gate, "").unwrap();
    let wait = format!("while [ -e '{}' ]; do sleep 0.05; done", gate.display());
    let mut held = exec_on(&url, &["job", "--", "sh", "-c", &wait])
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || used(&my, "job")));
    assert_eq!(my.sql("SELECT GET_LOCK('job', 0)"), "0");
    let status = support::dlock()
        .args(["-u", &url, "status", "job"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0));
    let shown = support::text(&status.stdout);
    assert!(
        shown.contains("job") && !shown.contains("foreign"),
        "{shown}"
    );
    let app = mariadb(&my, "SELECT GET_LOCK('job', 20)")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::remove_file(&gate).unwrap();
    assert!(wait_exit(&mut held, Duration::from_secs(10))
        .unwrap()
        .success());
    let out = app.wait_with_output().unwrap();
    assert_eq!(support::text(&out.stdout).trim(), "1");
}

#[test]
fn the_holders_session_killed_kills_cmd_at_once() {
    let my = MysqlServer::start();
    loops::session_ended_by_an_administrator(&get_lock(&my), || {
        let id = my.sql("SELECT IS_USED_LOCK('job')");
        my.sql(&format!("KILL {id}"));
    });
}

#[test]
fn a_name_longer_than_the_server_takes_is_refused() {
    let my = MysqlServer::start();
    let long = "k".repeat(65);
    let out = exec_on(&get_lock(&my), &[&long, "--", "true"])
        .output()
        .unwrap();
    let err = support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("64"), "{err}");
}

#[test]
fn eight_mixed_loops_never_overlap() {
    let my = MysqlServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (app, sql) = (dir.path().join("app.sh"), dir.path().join("app.sql"));
    let mariadb = mariadb(&my, "");
    let client: Vec<_> = std::iter::once(mariadb.get_program())
        .chain(mariadb.get_args().take_while(|a| *a != "-e"))
        .map(|a| loops::quoted(a.to_str().unwrap()))
        .collect();
    // The client's own `system` command runs the section while its session holds the name.
    let script = format!(
        "SELECT GET_LOCK('mixed', 60);\nsystem sh {}\nSELECT RELEASE_LOCK('mixed');\n",
        app.display()
    );
    std::fs::write(&sql, script).unwrap();
    loops::mixed(
        &get_lock(&my),
        "mixed",
        &dir.path().join("marks"),
        |section| {
            std::fs::write(&app, section).unwrap();
            format!(
                "MYSQL_PWD={MY_PASSWORD} {} < {} >/dev/null",
                client.join(" "),
                loops::quoted(sql.to_str().unwrap())
            )
        },
    );
}

#[test]
fn the_server_paused_past_the_bound_kills_cmd_first() {
    let my = MysqlServer::start();
    loops::paused_past_the_bound(&get_lock(&my), || my.pause(), || my.resume());
}
