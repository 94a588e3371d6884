//! What dlock prints: JSON shapes, the status table, shell assignments, the waiting line.

use std::io::Write;

use serde::Serialize;

use crate::backend::estimate::{self, Estimate};
use crate::backend::{
    now_ms, KeyStatus, LastRuns, Lease, LockInfo, ServerView, Sharing, WaiterInfo,
};
use crate::terminal::escape;

pub mod runs;
pub mod time;
mod waitline;
pub use self::runs::RunJson;
pub use self::time::{rfc3339_ms, short_duration};
pub use self::waitline::WaitLine;

/// Writes one line to stdout and flushes it. Unlike `println!`, which panics, a reader that
/// went away (`dlock status | head -1`) is an error the caller may ignore; a caller that must
/// know whether the line arrived (`lock`: the owner id is the only handle on the lease)
/// acts on it.
pub fn write_line(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// Writes a line of output whose loss only its reader can mind: a closed pipe ends the
/// output quietly, as it does for other command-line tools.
macro_rules! outln {
    ($($arg:tt)*) => {
        let _ = write_line(&format!($($arg)*));
    };
}

/// Prints one JSON object on its own line.
pub fn print_json<T: Serialize>(value: &T) {
    let _ = try_print_json(value);
}

/// Prints one JSON object on its own line; fails when stdout cannot take it.
pub fn try_print_json<T: Serialize>(value: &T) -> std::io::Result<()> {
    match serde_json::to_string(value) {
        Ok(line) => write_line(&line),
        Err(e) => Err(std::io::Error::other(format!("cannot encode JSON: {e}"))),
    }
}

/// False when this process was started with its stdout closed (`>&-`). Rust's runtime puts
/// `/dev/null` opened read-write in the place of a closed standard descriptor before `main`,
/// so that is what a closed stdout looks like here; a shell's `>/dev/null` opens it
/// write-only, and is the caller's explicit choice.
pub fn stdout_is_open() -> bool {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use nix::sys::stat::{fstat, stat, SFlag};
    use std::os::fd::AsRawFd;
    let fd = std::io::stdout().as_raw_fd();
    let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) else {
        return false;
    };
    let read_write = OFlag::from_bits_truncate(flags) & OFlag::O_ACCMODE == OFlag::O_RDWR;
    let is_null = match (fstat(fd), stat("/dev/null")) {
        (Ok(out), Ok(null)) => {
            SFlag::from_bits_truncate(out.st_mode).contains(SFlag::S_IFCHR)
                && out.st_rdev == null.st_rdev
        }
        _ => false,
    };
    !(read_write && is_null)
}

/// `lock --json` and `renew --json`.
#[derive(Debug, Serialize)]
pub struct LeaseJson {
    pub key: String,
    pub owner: String,
    pub fencing_token: u64,
    pub ttl_ms: u64,
    pub expires_at: String,
    pub reentered: bool,
}

impl From<&Lease> for LeaseJson {
    fn from(l: &Lease) -> Self {
        LeaseJson {
            key: l.key.clone(),
            owner: l.owner.clone(),
            fencing_token: l.fencing_token,
            ttl_ms: l.ttl.as_millis() as u64,
            expires_at: rfc3339_ms(l.expires_at_ms),
            reentered: l.reentered,
        }
    }
}

/// One line of `status --json`.
#[derive(Debug, Serialize)]
pub struct StatusJson<'a> {
    pub key: &'a str,
    pub held: bool,
    #[serde(flatten)]
    pub lock: Option<&'a LockInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_for_ms: Option<u64>,
    /// The run has finished and `exec --hold-at-least` keeps the key held until then
    /// (`held_until_ms` beside it, from the holder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<String>,
    pub waiters: Option<Vec<WaiterJson<'a>>>,
    /// Every holder of a key held shared or as a semaphore, the first one as above;
    /// absent for an exclusive lock, whose JSON keeps its shape.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<&'a LockInfo>,
    /// `"shared"` or `{"limit": N}`; absent for an exclusive lock.
    #[serde(skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    /// Redlock: each server's view (see [`ServerView`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<&'a Vec<ServerView>>,
    pub backend: &'a str,
    /// The last run and the last success (`null`: none on record); only for named keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<Option<RunJson<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_success: Option<Option<RunJson<'a>>>,
}

impl<'a> StatusJson<'a> {
    pub fn new(s: &'a KeyStatus, backend: &'a str) -> Self {
        StatusJson {
            key: &s.key,
            held: s.lock.is_some(),
            lock: s.lock.as_ref(),
            acquired_at: s
                .lock
                .as_ref()
                .filter(|l| l.holder.acquired_at_ms > 0)
                .map(|l| rfc3339_ms(l.holder.acquired_at_ms)),
            held_for_ms: s.lock.as_ref().and_then(|l| l.holder.held_for_ms()),
            held_until: s
                .lock
                .as_ref()
                .and_then(|l| l.holder.held_until_ms)
                .map(rfc3339_ms),
            waiters: s.waiters.as_ref().map(|ws| {
                let ahead = |i: usize| i as u64 + 1;
                ws.iter()
                    .enumerate()
                    .map(|(i, w)| WaiterJson::new(w, ahead(i)))
                    .collect()
            }),
            holders: s.holders.iter().collect(),
            sharing: s.sharing,
            servers: s.servers.as_ref(),
            backend,
            last_run: None,
            last_success: None,
        }
    }

    /// With the key's run records, and each waiter's expected wait made from them.
    pub fn with_runs(mut self, runs: &'a LastRuns) -> Self {
        let typical = estimate::typical(runs);
        let holder_ran = self.held_for_ms;
        for w in self.waiters.iter_mut().flatten() {
            w.estimate = typical.map(|t| Estimate::new(t, w.position, holder_ran));
        }
        self.last_run = Some(runs.last.as_ref().map(RunJson::new));
        self.last_success = Some(runs.last_success.as_ref().map(RunJson::new));
        self
    }
}

/// One queued waiter in `status --json`, in queue order. The time in a waiter's
/// [`Holder`](crate::backend::Holder) is when it started waiting, so it is named for that
/// here rather than `acquired_at`.
#[derive(Debug, Serialize)]
pub struct WaiterJson<'a> {
    pub id: &'a str,
    pub host: &'a str,
    pub pid: u32,
    pub user: &'a str,
    pub command: &'a str,
    pub waiting_since: String,
    pub waiting_since_ms: u64,
    pub waited_ms: u64,
    /// `"shared"` or `{"limit": N}` as the waiter asks; absent for an exclusive waiter.
    #[serde(skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    /// Its place in the queue, 1 first.
    pub position: u64,
    pub priority: i32,
    /// Its expected wait; `null` without a run history (or for a listing of every key).
    pub estimate: Option<Estimate>,
}

impl<'a> WaiterJson<'a> {
    pub fn new(w: &'a WaiterInfo, position: u64) -> Self {
        let h = &w.holder;
        WaiterJson {
            id: &w.id,
            host: &h.host,
            pid: h.pid,
            user: &h.user,
            command: &h.command,
            waiting_since: rfc3339_ms(h.acquired_at_ms),
            waiting_since_ms: h.acquired_at_ms,
            waited_ms: now_ms().saturating_sub(h.acquired_at_ms),
            sharing: w.sharing,
            position,
            priority: w.priority,
            estimate: None,
        }
    }
}

/// The human `status` table.
pub fn print_status_table(states: &[KeyStatus], backend: &str) {
    for line in status_lines(states, &[], backend) {
        outln!("{line}");
    }
}

/// The lines of the human `status` table; under each key, its waiters and, when `runs`
/// has an entry for it (in the order of `states`), its last run.
pub fn status_lines(states: &[KeyStatus], runs: &[Option<LastRuns>], backend: &str) -> Vec<String> {
    let mut out = Vec::new();
    if states.is_empty() {
        out.push(format!("no locks held on {backend}"));
        return out;
    }
    let header = [
        "KEY", "OWNER", "TOKEN", "HOST", "PID", "USER", "HELD FOR", "TTL LEFT", "WAITERS",
        "COMMAND",
    ];
    // Escaped before the widths are measured, so that the columns line up as shown.
    let rows: Vec<Vec<Vec<String>>> = states
        .iter()
        .map(|s| status_rows(s).into_iter().map(escape_cells).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows.iter().flatten() {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len() - 1;
        let padded: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    out.push(line(header.iter().map(|s| s.to_string()).collect()));
    for (i, (key_rows, state)) in rows.into_iter().zip(states).enumerate() {
        out.extend(key_rows.into_iter().map(line));
        if let Some(servers) = &state.servers {
            out.extend(server_lines(servers, state.lock.is_some()));
        }
        let typical = runs
            .get(i)
            .and_then(|r| r.as_ref())
            .and_then(estimate::typical);
        queue_lines(state, typical, &mut out);
        if let Some(Some(r)) = runs.get(i) {
            out.extend(runs::lines(r, now_ms()));
        }
    }
    out.push(format!("backend: {backend}"));
    // The lines under a row carry holders' and servers' text too: one rule for them all.
    out.into_iter().map(|l| escape(&l).into_owned()).collect()
}

fn escape_cells(row: Vec<String>) -> Vec<String> {
    row.into_iter().map(|c| escape(&c).into_owned()).collect()
}

/// The waiters of one key, in queue order, under its row, each with its priority when it
/// has one and its expected wait when runs take `typical` ms.
fn queue_lines(state: &KeyStatus, typical: Option<u64>, out: &mut Vec<String>) {
    let holder_ran = state.lock.as_ref().and_then(|l| l.holder.held_for_ms());
    for (i, w) in state.waiters.iter().flatten().enumerate() {
        let waited = short_duration(now_ms().saturating_sub(w.holder.acquired_at_ms));
        let h = &w.holder;
        let asks = match w.sharing {
            Sharing::Exclusive => String::new(),
            s => format!(" ({})", s.describe()),
        };
        let priority = match w.priority {
            0 => String::new(),
            p => format!(", priority {p}"),
        };
        let expect = typical
            .map(|t| Estimate::new(t, i as u64 + 1, holder_ran))
            .map(|e| format!(", {}", runs::estimate(&e)))
            .unwrap_or_default();
        out.push(format!(
            "  waiter {}: {}@{} pid {} ({}), waiting {waited}{asks}{priority}{expect}",
            i + 1,
            h.user,
            h.host,
            h.pid,
            h.command
        ));
    }
}

/// The sub-lines of a quorum backend's key: one per server, then whether a majority agrees.
pub fn server_lines(servers: &[ServerView], held: bool) -> Vec<String> {
    let width = servers
        .iter()
        .map(|v| escape(&v.server).chars().count())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<String> = servers
        .iter()
        .map(|v| {
            let seen = match (&v.error, &v.owner) {
                (Some(e), _) => format!("error: {e}"),
                (None, None) => "(free)".to_string(),
                (None, Some(owner)) => {
                    let token = v.fencing_token.map_or("?".into(), |t| t.to_string());
                    let ttl = v.ttl_left_ms.map_or("?".into(), short_duration);
                    let mark = if v.agrees {
                        ""
                    } else {
                        "  (not the majority's)"
                    };
                    format!("{owner}  token {token}  ttl {ttl}{mark}")
                }
            };
            format!("  └ {:<width$}  {}", escape(&v.server), escape(&seen))
        })
        .collect();
    let agreeing = servers.iter().filter(|v| v.agrees).count();
    let needed = servers.len() / 2 + 1;
    lines.push(if held {
        format!(
            "  └ quorum: yes, {agreeing} of {} servers agree ({needed} needed)",
            servers.len()
        )
    } else {
        format!(
            "  └ quorum: no holder on {needed} of {} servers",
            servers.len()
        )
    });
    lines
}

/// One row per holder: one for an exclusive lock (or a free key), every holder of a shared
/// or semaphore key, its key cell saying how many of how many (`sem (2 of 4)`).
fn status_rows(s: &KeyStatus) -> Vec<Vec<String>> {
    if s.holders.is_empty() {
        return vec![status_row(s, s.lock.as_ref())];
    }
    let key = match s.sharing.capacity() {
        Some(n) => format!("{} ({} of {n})", s.key, s.holders.len()),
        None => format!("{} (shared by {})", s.key, s.holders.len()),
    };
    s.holders
        .iter()
        .map(|h| {
            let mut row = status_row(s, Some(h));
            row[0] = key.clone();
            row
        })
        .collect()
}

/// The row of `s` showing `lock` (its first holder, or one of several).
fn status_row(s: &KeyStatus, lock: Option<&LockInfo>) -> Vec<String> {
    let waiters = s
        .waiters
        .as_ref()
        .map_or("?".to_string(), |w| w.len().to_string());
    let Some(l) = lock else {
        let mut row = vec![s.key.clone(), "(free)".into()];
        row.extend(std::iter::repeat_n("-".to_string(), 6));
        row.extend([waiters, "-".into()]);
        return row;
    };
    vec![
        s.key.clone(),
        l.owner.clone(),
        l.fencing_token.to_string(),
        l.holder.host.clone(),
        l.holder.pid.to_string(),
        l.holder.user.clone(),
        l.holder.held_for_text(),
        l.ttl_left_ms.map_or("while alive".into(), short_duration),
        waiters,
        match l.why_held() {
            Some(why) => format!("{} ({why})", l.holder.command),
            None => l.holder.command.clone(),
        },
    ]
}

/// Quotes `s` for a POSIX shell (single quotes; `'` becomes `'\''`).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn server_sub_lines() {
        let view =
            |server: &str, owner: Option<&str>, agrees: bool, error: Option<&str>| ServerView {
                server: server.into(),
                owner: owner.map(String::from),
                fencing_token: owner.map(|_| 7),
                ttl_left_ms: owner.map(|_| 4_200),
                agrees,
                error: error.map(String::from),
            };
        let servers = vec![
            view("redis://a:1", Some("o1"), true, None),
            view("redis://b:2", None, false, None),
            view("redis://c:3", Some("o1"), true, None),
        ];
        let lines = server_lines(&servers, true);
        assert_eq!(lines.len(), 4);
        assert!(lines[0].contains("redis://a:1") && lines[0].contains("o1  token 7  ttl 4.2s"));
        assert!(lines[1].contains("(free)"));
        assert!(lines[3].contains("quorum: yes, 2 of 3"), "{}", lines[3]);
        let split = vec![
            view("redis://a:1", Some("o1"), false, None),
            view("redis://b:2", Some("o2"), false, None),
            view("redis://c:3", None, false, Some("timed out")),
        ];
        let lines = server_lines(&split, false);
        assert!(lines[0].contains("not the majority's"));
        assert!(lines[2].contains("error: timed out"));
        assert!(lines[3].contains("quorum: no"), "{}", lines[3]);
    }

    #[test]
    fn a_holder_from_elsewhere_is_one_escaped_row() {
        let holder = crate::backend::Holder {
            host: "h\u{2028}ost".into(),
            pid: 7,
            user: "u".into(),
            command: "sleep 20\n# second line \x1b[31mred".into(),
            acquired_at_ms: now_ms(),
            held_until_ms: None,
            value: None,
        };
        let lock = LockInfo {
            key: "ml".into(),
            owner: "o\r1".into(),
            fencing_token: 3,
            holder: holder.clone(),
            ttl_left_ms: Some(9_000),
            depth: 1,
        };
        let waiter = WaiterInfo {
            id: "w".into(),
            holder,
            sharing: Sharing::Exclusive,
            priority: 0,
        };
        let state = KeyStatus::exclusive("ml", Some(lock)).with_waiters(vec![waiter]);
        let lines = status_lines(&[state], &[], "redis://h:1");
        assert_eq!(lines.len(), 4, "{lines:?}");
        for line in &lines {
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        assert!(
            lines[1].ends_with("sleep 20\\n# second line \\e[31mred"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("h\\u{2028}ost"), "{}", lines[1]);
        assert!(
            lines[2].contains("waiter 1: u@h\\u{2028}ost"),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn durations() {
        assert_eq!(short_duration(350), "350ms");
        assert_eq!(short_duration(4_200), "4.2s");
        assert_eq!(short_duration(303_000), "5m03s");
        assert_eq!(short_duration(3_720_000), "1h02m");
    }
}
