//! `dlock status --watch [KEY...]`: the keys' holders, queues and last runs, kept up to
//! date until Ctrl-C.
//!
//! On a terminal (and without `--json`) the view is redrawn in place: woken by
//! [`Backend::watch`] when a key may have changed, and at least every [`REFRESH`] so that
//! the held-for and TTL columns count. Elsewhere (a pipe, a log file, `--json`) it prints
//! a snapshot at start and a new one each time something other than those clocks
//! changes: a log of the keys' changes, never a flood of identical frames. SIGINT,
//! SIGTERM and SIGHUP end it with exit 0: stopping a view is its normal end.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::common::last_runs;
use crate::backend::{now_ms, Backend, KeyStatus, LastRuns};
use crate::cli::Global;
use crate::error::Result;
use crate::output;
use crate::supervisor::{Caught, Signals};

/// The longest time between two looks at the store.
const REFRESH: Duration = Duration::from_secs(1);

/// Runs the view until a signal ends it.
pub async fn run(global: &Global, keys: &[String]) -> Result<u8> {
    let mut signals = Signals::catch()?;
    let (_, backend) = super::common::open(global, None, super::common::one_shot()).await?;
    let live = !global.json && std::io::stdout().is_terminal();
    let mut last_gist = None;
    loop {
        let looked = look(&*backend, keys, !global.quiet && !live).await;
        if live {
            // A store that stops answering is shown, and looked at again: the view is for
            // watching, outages included.
            let lines = match looked {
                Ok((states, runs)) => output::status_lines(&states, &runs, &backend.describe()),
                Err(e) => vec![format!("dlock: {e}")],
            };
            draw(&lines, last_gist.is_none());
            last_gist = Some(String::new());
        } else {
            let (states, runs) = looked?;
            let gist = gist(&states, &runs);
            if last_gist.as_ref() != Some(&gist) {
                if snapshot(global.json, &states, &runs, &backend.describe()).is_err() {
                    // Its reader is gone (`| head`): nobody is watching any more.
                    return Ok(crate::exit::OK);
                }
                last_gist = Some(gist);
            }
        }
        tokio::select! {
            woken = sleep_on(&*backend, keys) => woken?,
            caught = signals.next() => {
                if let Caught::Forward(Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP) = caught {
                    if live {
                        println!();
                    }
                    return Ok(crate::exit::OK);
                }
            }
        }
    }
}

/// The shortest time between two looks: a store's `watch` returns at once while a key is
/// free (it waits for releases), which would otherwise make the view spin.
const MIN_GAP: Duration = Duration::from_millis(250);

/// Sleeps until the store says one of `keys` may have changed, or [`REFRESH`], but at least
/// [`MIN_GAP`].
async fn sleep_on(backend: &dyn Backend, keys: &[String]) -> Result<()> {
    let started = tokio::time::Instant::now();
    backend.watch(keys, REFRESH).await?;
    tokio::time::sleep_until(started + MIN_GAP).await;
    Ok(())
}

type Runs = Vec<Option<LastRuns>>;

/// The keys' states (every held lock when none is named) and their run records.
async fn look(
    backend: &dyn Backend,
    keys: &[String],
    warn: bool,
) -> Result<(Vec<KeyStatus>, Runs)> {
    let states = if keys.is_empty() {
        backend.list().await?.held
    } else {
        backend.status(keys).await?
    };
    Ok((states, last_runs(backend, keys, warn).await))
}

/// One frame on the terminal, drawn over the last one: home, each line cleared to its
/// end, then everything below cleared (no blank flash between frames). The first frame
/// clears the screen.
fn draw(lines: &[String], first: bool) {
    let mut frame = String::from(if first { "\x1b[H\x1b[2J" } else { "\x1b[H" });
    let title = format!(
        "dlock status --watch   {}   (Ctrl-C to quit)",
        output::rfc3339_ms(now_ms())
    );
    for line in [title, String::new()].iter().chain(lines) {
        frame.push_str(line);
        frame.push_str("\x1b[K\n");
    }
    frame.push_str("\x1b[J");
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(frame.as_bytes());
    let _ = out.flush();
}

/// One snapshot for a pipe: a time line and the table, or JSON lines. Fails when stdout
/// cannot take it.
fn snapshot(json: bool, states: &[KeyStatus], runs: &Runs, backend: &str) -> std::io::Result<()> {
    if json {
        for (i, s) in states.iter().enumerate() {
            let line = output::StatusJson::new(s, backend);
            match runs.get(i) {
                Some(Some(r)) => output::try_print_json(&line.with_runs(r))?,
                _ => output::try_print_json(&line)?,
            }
        }
        return Ok(());
    }
    output::write_line(&format!("--- {}", output::rfc3339_ms(now_ms())))?;
    for line in output::status_lines(states, runs, backend) {
        output::write_line(&line)?;
    }
    Ok(())
}

/// What a snapshot is about: the states without their clocks (TTL left), and the runs.
fn gist(states: &[KeyStatus], runs: &Runs) -> String {
    let still: Vec<KeyStatus> = states
        .iter()
        .cloned()
        .map(|mut s| {
            if let Some(l) = &mut s.lock {
                l.ttl_left_ms = None;
            }
            for v in s.servers.iter_mut().flatten() {
                v.ttl_left_ms = None;
            }
            s
        })
        .collect();
    serde_json::to_string(&(still, runs)).unwrap_or_default()
}
