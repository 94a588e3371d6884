//! `dlock leader NAME [--watch] [--here]`: who leads the election NAME.
//!
//! The leader is NAME's holder (`status` reads it); what it proclaims is its holder's
//! `value` (`elect --value`), or for a holder that is not an `elect` (an `exec`, another
//! tool's lock) `HOST PID COMMAND`. `--watch` sleeps on [`Backend::watch`], which uses the
//! store's notification where it has one.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde::Serialize;

use crate::backend::{now_ms, Backend, LockInfo};
use crate::cli::{Global, LeaderArgs};
use crate::config::check_key;
use crate::error::Result;
use crate::exit;
use crate::output::{self, try_print_json};
use crate::supervisor::{Caught, Signals};

/// The longest sleep between two looks while watching.
const REFRESH: Duration = Duration::from_secs(1);

/// The shortest time between two looks: a store's `watch` returns at once while the key
/// is free (it waits for releases), which would otherwise make the loop spin.
const MIN_GAP: Duration = Duration::from_millis(50);

/// One answer, as `--json` prints it: every field, `null` when nobody leads.
#[derive(Debug, Serialize)]
struct LeaderJson<'a> {
    name: &'a str,
    leader: bool,
    value: Option<String>,
    owner: Option<&'a str>,
    host: Option<&'a str>,
    pid: Option<u32>,
    fencing_token: Option<u64>,
    held_for_ms: Option<u64>,
    backend: &'a str,
}

/// Prints the leader (or follows it with `--watch`); exit 0 when someone leads, 3 when
/// nobody does (`--here`: 0 only when this host leads).
pub async fn run(global: &Global, args: LeaderArgs) -> Result<u8> {
    check_key(&args.name)?;
    if args.watch {
        return watch(global, &args.name).await;
    }
    let (_, backend) =
        super::common::open_ready(global, &args.name, super::common::one_shot()).await?;
    let leader = leader(&*backend, &args.name).await?;
    if args.here {
        let here = crate::holder::hostname();
        let ours = leader.as_ref().is_some_and(|l| l.holder.host == here);
        return Ok(if ours { exit::OK } else { exit::NO_LEADER });
    }
    let _ = show(global, &args.name, leader.as_ref(), &backend.describe());
    if leader.is_none() && !global.quiet && !global.json {
        crate::say!("nobody leads '{}' on {}", args.name, backend.describe());
    }
    Ok(if leader.is_some() {
        exit::OK
    } else {
        exit::NO_LEADER
    })
}

/// NAME's leader: its first holder, if any.
async fn leader(backend: &dyn Backend, name: &str) -> Result<Option<LockInfo>> {
    let states = backend.status(&[name.to_string()]).await?;
    Ok(states.into_iter().next().and_then(|s| s.lock))
}

/// What `info` proclaims: its value, or who it is when it proclaims nothing. Another
/// tool's holder has no pid; what it put in its host field (a Curator participant's id)
/// names it.
pub fn value_of(info: &LockInfo) -> String {
    let h = &info.holder;
    match &h.value {
        Some(v) => v.clone(),
        None if h.pid == 0 && h.host.is_empty() => h.command.clone(),
        None if h.pid == 0 => format!("{} {}", h.host, h.command),
        None => format!("{} {} {}", h.host, h.pid, h.command),
    }
}

/// Prints one answer: a line `VALUE (host H, pid P, term T, for D)` or `none`, or its JSON.
fn show(global: &Global, name: &str, leader: Option<&LockInfo>, backend: &str) -> Result<()> {
    let printed = if global.json {
        try_print_json(&json(name, leader, backend))
    } else {
        output::write_line(&line(leader))
    };
    printed.map_err(|e| crate::error::Error::Internal(format!("cannot write: {e}")))
}

/// How long `info` has led; `None` when its holder recorded no time (another tool's key).
fn held_for_ms(info: &LockInfo) -> Option<u64> {
    let since = info.holder.acquired_at_ms;
    (since > 0).then(|| now_ms().saturating_sub(since))
}

fn line(leader: Option<&LockInfo>) -> String {
    let Some(l) = leader else {
        return "none".into();
    };
    let h = &l.holder;
    let held = match held_for_ms(l) {
        Some(ms) => humantime::format_duration(Duration::from_secs(ms / 1000)).to_string(),
        None => "?".into(),
    };
    let who = match h.pid {
        0 => format!("owner {}", l.owner),
        pid => format!("host {}, pid {pid}", h.host),
    };
    let text = format!(
        "{} ({who}, term {}, for {held})",
        value_of(l),
        l.fencing_token
    );
    crate::terminal::escape(&text).into_owned()
}

fn json<'a>(name: &'a str, leader: Option<&'a LockInfo>, backend: &'a str) -> LeaderJson<'a> {
    LeaderJson {
        name,
        leader: leader.is_some(),
        value: leader.map(value_of),
        owner: leader.map(|l| l.owner.as_str()),
        host: leader.map(|l| l.holder.host.as_str()),
        pid: leader.map(|l| l.holder.pid),
        fencing_token: leader.map(|l| l.fencing_token),
        held_for_ms: leader.and_then(held_for_ms),
        backend,
    }
}

/// `--watch`: one answer at start and one per change of leader (owner and term), until
/// SIGINT, SIGTERM or SIGHUP (exit 0) or until stdout's reader goes away.
async fn watch(global: &Global, name: &str) -> Result<u8> {
    let mut signals = Signals::catch()?;
    let (_, backend) = super::common::open_ready(global, name, super::common::one_shot()).await?;
    let keys = [name.to_string()];
    let mut last: Option<Option<(String, u64)>> = None;
    loop {
        let leader = leader(&*backend, name).await?;
        let now = leader.as_ref().map(|l| (l.owner.clone(), l.fencing_token));
        if last.as_ref() != Some(&now) {
            if show(global, name, leader.as_ref(), &backend.describe()).is_err() {
                return Ok(exit::OK);
            }
            last = Some(now);
        }
        let started = tokio::time::Instant::now();
        tokio::select! {
            woken = backend.watch(&keys, REFRESH) => {
                woken?;
                tokio::time::sleep_until(started + MIN_GAP).await;
            }
            caught = signals.next() => {
                if let Caught::Forward(Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP) = caught {
                    return Ok(exit::OK);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Holder;

    fn info(value: Option<&str>) -> LockInfo {
        LockInfo {
            key: "k".into(),
            owner: "o".into(),
            fencing_token: 7,
            holder: Holder {
                host: "h".into(),
                pid: 9,
                command: "run me".into(),
                value: value.map(str::to_string),
                ..Holder::default()
            },
            ttl_left_ms: None,
            depth: 1,
        }
    }

    #[test]
    fn the_value_is_the_proclamation_or_who_holds_it() {
        assert_eq!(value_of(&info(Some("primary"))), "primary");
        assert_eq!(value_of(&info(None)), "h 9 run me");
        let mut curator = info(None);
        curator.holder.pid = 0;
        curator.holder.command = "(Curator InterProcessMutex)".into();
        assert_eq!(value_of(&curator), "h (Curator InterProcessMutex)");
        assert!(line(Some(&info(Some("p")))).starts_with("p (host h, pid 9, term 7, for "));
        assert_eq!(line(None), "none");
    }
}
