//! The waiting line: what a waiting `exec`, `lock` or `wait` tells on stderr.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::time::short_duration;
use crate::backend::waiting::BRIEF_RIDE_OUT;
use crate::backend::{ProgressFn, WaitInfo};
use crate::cli::Global;
use crate::expect::Expectation;

/// The waiting line on stderr: on a terminal one status line redrawn in place; elsewhere a
/// line when waiting starts, every [`WaitLine::LOG_EVERY`] after, and when what it says
/// changes between "no answer" and "waiting". Silent with `-q`.
///
/// It says it is waiting for a holder only once the backend told of the wait (its progress
/// callback): until then the store has not answered, and the line says so instead.
pub struct WaitLine {
    state: Arc<Mutex<LineState>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

struct LineState {
    key: String,
    backend: String,
    /// When the line was started: nothing is shown for [`WaitLine::QUIET_FOR`] (for
    /// [`WaitLine::SILENT_FOR`] while the store has not answered).
    started: Instant,
    /// False while connecting, true once acquiring.
    acquiring: bool,
    /// When the current step (connecting, acquiring) began.
    since: Instant,
    /// What the backend last reported; `None` until it answered at all.
    info: Option<WaitInfo>,
    /// The expected wait, once the key's history is read.
    expect: Option<Expectation>,
    tty: bool,
    frame: usize,
    last_log: Option<Instant>,
    /// Whether the last line logged said "no answer".
    logged_silent: Option<bool>,
    drawn: bool,
}

impl WaitLine {
    /// How often a non-terminal waiter says it is still waiting.
    pub const LOG_EVERY: Duration = Duration::from_secs(30);
    /// Nothing is shown for waits shorter than this (a quick hand-off is not news).
    const QUIET_FOR: Duration = Duration::from_millis(300);
    /// Nor for a store that has not answered yet, for this long: connecting to a store of
    /// several nodes over TLS can take a second on a loaded machine, and a refusal that
    /// follows (a wrong password), or a store that stays down for the least ride-out
    /// (`--no-wait`), must stay the one line the run prints.
    const SILENT_FOR: Duration = BRIEF_RIDE_OUT.saturating_add(Duration::from_millis(500));

    /// Starts the line for `key` while connecting to `backend`, or returns `None` under `-q`.
    pub fn start(global: &Global, key: &str, backend: &str) -> Option<WaitLine> {
        // With `--log-format json`, stderr is one JSON object per line: the wait is told
        // by its events there, never by a line of text.
        if global.quiet || global.log_format == crate::events::LogFormat::Json {
            return None;
        }
        let tty = std::io::stderr().is_terminal();
        let now = Instant::now();
        let state = Arc::new(Mutex::new(LineState {
            key: key.to_string(),
            backend: backend.to_string(),
            started: now,
            acquiring: false,
            since: now,
            info: None,
            expect: None,
            tty,
            frame: 0,
            last_log: None,
            logged_silent: None,
            drawn: false,
        }));
        let ticking = Arc::clone(&state);
        let ticker = tokio::spawn(async move {
            // The first tick comes once a wait is worth mentioning: the line appears then,
            // not at the next whole second.
            let period = Duration::from_millis(if tty { 120 } else { 1000 });
            let first = tokio::time::Instant::now() + WaitLine::QUIET_FOR;
            let mut every = tokio::time::interval_at(first, period);
            loop {
                every.tick().await;
                lock(&ticking).tick();
            }
        });
        Some(WaitLine {
            state,
            ticker: Some(ticker),
        })
    }

    /// Connected to `backend` (its own description): acquiring starts now.
    pub fn connected(&self, backend: &str) {
        let mut state = lock(&self.state);
        state.backend = backend.to_string();
        state.acquiring = true;
        state.since = Instant::now();
    }

    /// Shows the expected wait once `expect` knows it.
    pub fn expecting(&self, expect: &Expectation) {
        lock(&self.state).expect = Some(expect.clone());
    }

    /// The callback the backend calls with news about the wait.
    pub fn progress(&self) -> ProgressFn {
        let state = Arc::clone(&self.state);
        Arc::new(move |info: &WaitInfo| {
            lock(&state).info = Some(info.clone());
        })
    }
}

fn lock(state: &Mutex<LineState>) -> std::sync::MutexGuard<'_, LineState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for WaitLine {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
        let state = lock(&self.state);
        if state.tty && state.drawn {
            eprint!("\r\x1b[2K");
        }
    }
}

impl LineState {
    fn tick(&mut self) {
        let quiet = match self.info {
            None => WaitLine::SILENT_FOR,
            Some(_) => WaitLine::QUIET_FOR,
        };
        if self.started.elapsed() < quiet {
            return;
        }
        if self.tty {
            const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            self.frame = (self.frame + 1) % SPINNER.len();
            let line = self.describe();
            let line = crate::terminal::escape(&line);
            eprint!("\r\x1b[2K{} {line}", SPINNER[self.frame]);
            self.drawn = true;
            return;
        }
        let silent = self.info.is_none();
        let due = self
            .last_log
            .is_none_or(|t| t.elapsed() >= WaitLine::LOG_EVERY);
        if due || self.logged_silent != Some(silent) {
            crate::say!("{}", self.describe());
            self.last_log = Some(Instant::now());
            self.logged_silent = Some(silent);
        }
    }

    fn describe(&self) -> String {
        let quiet_for = short_duration(self.since.elapsed().as_millis() as u64);
        let Some(info) = &self.info else {
            let step = if self.acquiring {
                format!("acquiring '{}'", self.key)
            } else {
                format!("connecting, for '{}'", self.key)
            };
            return format!("no answer from {} for {quiet_for} ({step})", self.backend);
        };
        let mut s = format!("waiting for '{}' on {}", self.key, self.backend);
        if let Some(h) = &info.holder {
            s += &format!(
                ", held by {}@{} pid {} ({}) for {}",
                h.holder.user,
                h.holder.host,
                h.holder.pid,
                h.holder.command,
                h.holder.held_for_text()
            );
        }
        match (info.position, info.waiters) {
            (Some(p), Some(n)) => s += &format!(", position {p} of {n}"),
            (Some(p), None) => s += &format!(", position {p}"),
            _ => {}
        }
        if let Some(e) = self.expect.as_ref().and_then(|x| x.now(info)) {
            s += &format!(", {}", super::runs::estimate(&e));
        }
        s + &format!(", waited {quiet_for}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waiting_line_claims_a_wait_only_once_the_store_answered() {
        let now = Instant::now();
        let mut state = LineState {
            key: "k".into(),
            backend: "redis://h:1".into(),
            started: now,
            acquiring: false,
            since: now,
            info: None,
            expect: None,
            tty: false,
            frame: 0,
            last_log: None,
            logged_silent: None,
            drawn: false,
        };
        let line = state.describe();
        assert!(
            line.starts_with("no answer from redis://h:1 for "),
            "{line}"
        );
        assert!(line.ends_with("(connecting, for 'k')"), "{line}");
        state.acquiring = true;
        assert!(state.describe().ends_with("(acquiring 'k')"));
        state.info = Some(WaitInfo {
            position: Some(2),
            waiters: Some(3),
            ..WaitInfo::default()
        });
        let line = state.describe();
        assert!(line.starts_with("waiting for 'k' on redis://h:1"), "{line}");
        assert!(line.contains("position 2 of 3"), "{line}");
    }
}
