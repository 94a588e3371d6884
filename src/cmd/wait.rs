//! `dlock wait KEY [--timeout DUR] [--shared | --limit N]`: block until KEY is free (for
//! a caller with the same options: no exclusive holder left, fewer than N holders), without
//! taking it.
//!
//! Looks at the key, then sleeps in the backend's [`Backend::watch`] (a notification of a
//! release where the store has one) for at most what is left of the holder's lease: a
//! lease that expires frees the key without telling anyone, so the wait never sleeps past
//! it without looking again.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::backend::sharing::Admission;
use crate::backend::waiting::LATE;
use crate::backend::{Backend, KeyStatus, LockInfo, Sharing};
use crate::cli::{Global, WaitArgs};
use crate::error::{Error, Result};
use crate::supervisor::Signals;
use crate::{exit, output};

/// The longest sleep without looking again, when the holder's lease gives no bound (the
/// local store's bound leases): a missed notification costs at most this.
const LOOK_AGAIN: Duration = Duration::from_secs(30);
/// The shortest sleep, for a lease about to expire.
const MIN_PAUSE: Duration = Duration::from_millis(5);
/// The longest sleep while several hold the key: any of them may go without a word.
const LOOK_AGAIN_MANY: Duration = Duration::from_millis(250);

/// `wait --json`: one object when the wait ends.
#[derive(Serialize)]
struct WaitJson<'a> {
    key: &'a str,
    free: bool,
    waited_ms: u64,
    backend: &'a str,
}

/// Waits as `args` say; exit 0 when KEY is free, 75 when the timeout elapsed.
pub async fn run(global: &Global, args: WaitArgs) -> Result<u8> {
    let mut signals = Signals::catch()?;
    let key = args.key.as_str();
    crate::config::check_key(key)?; // opened without it: `about` names the key
    let started = Instant::now();
    let deadline = args.timeout.and_then(|t| started.checked_add(t));
    let backend = tokio::select! {
        opened = super::common::open(global, None, super::common::ride_out_until(started, args.timeout)) => opened.map_err(|e| about(key, e))?.1,
        sig = signals.recv() => {
            return Err(Error::Cancelled(format!("cancelled by {sig} while connecting for '{key}'"), sig as i32));
        }
    };
    let name = backend.describe();
    // A store that keeps not answering past the deadline ends the wait as the waiting loop
    // ends an `exec`'s (`waiting::LATE`).
    let late = async {
        match deadline {
            Some(d) => tokio::time::sleep_until((d + LATE).into()).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        held = until_free(&*backend, key, args.sharing.sharing(), deadline) => held.map_err(|e| about(key, e))?,
        _ = late => {
            return Err(Error::Unavailable(format!("waiting for '{key}' to be free on {name}: no answer by the end of the wait allowed")));
        }
        sig = signals.recv() => {
            return Err(Error::Cancelled(format!("waiting for '{key}' to be free on {name} cancelled by {sig}"), sig as i32));
        }
    };
    let waited_ms = started.elapsed().as_millis() as u64;
    if global.json {
        output::print_json(&WaitJson {
            key,
            free: outcome.is_none(),
            waited_ms,
            backend: &name,
        });
    }
    match outcome {
        None => Ok(exit::OK),
        Some(holder) => {
            if !global.quiet {
                let waited = output::short_duration(waited_ms);
                crate::say!(
                    "lock '{key}' is still held by {} on {name} after waiting {waited} (--timeout)",
                    holder.describe()
                );
            }
            Ok(exit::NOT_OBTAINED)
        }
    }
}

/// `e`, saying which key was being waited for when the backend failed.
fn about(key: &str, e: Error) -> Error {
    let say = |m: String| format!("waiting for '{key}' to be free: {m}");
    match e {
        e @ (Error::Unavailable(_) | Error::Transient(_) | Error::Internal(_)) => {
            e.map_message(say)
        }
        other => other,
    }
}

/// The first holder of `state` when a caller asking for `sharing` would have to wait;
/// `None` when it could take the key now.
fn blocking(state: KeyStatus, sharing: Sharing, backend: &str) -> Result<Option<LockInfo>> {
    let Some(first) = state.lock else {
        return Ok(None);
    };
    let holders = state.holders.len().max(1) as u32;
    match sharing.admit(Some(state.sharing), holders, &[]) {
        Admission::Admit => Ok(None),
        Admission::Wait => Ok(Some(first)),
        Admission::Conflict(held) => Err(sharing.conflict(&state.key, backend, held)),
    }
}

/// Returns `None` once `key` is free, or the holder when `deadline` came first.
async fn until_free(
    backend: &dyn Backend,
    key: &str,
    sharing: Sharing,
    deadline: Option<Instant>,
) -> Result<Option<LockInfo>> {
    let keys = [key.to_string()];
    let name = backend.describe();
    let mut told = false;
    loop {
        let Some(state) = backend.status(&keys).await?.into_iter().next() else {
            return Ok(None);
        };
        let many = state.holders.len() > 1;
        let Some(holder) = blocking(state, sharing, &name)? else {
            return Ok(None);
        };
        if !std::mem::replace(&mut told, true) {
            let who = holder.describe();
            log::info!(target: "dlock", event = "waiting", key = key, holder = who.as_str();
                "waiting for '{key}' to be free: held by {who}");
        }
        let now = Instant::now();
        let left = deadline.map(|d| d.saturating_duration_since(now));
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(Some(holder));
        }
        let expiry = holder.ttl_left_ms.map(Duration::from_millis);
        let most = if many { LOOK_AGAIN_MANY } else { LOOK_AGAIN };
        let pause = [Some(most), expiry, left]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(LOOK_AGAIN)
            .max(MIN_PAUSE);
        backend.watch(&keys, pause).await?;
        log::debug!(target: "dlock", event = "woken", key = key;
            "looking at '{key}' again");
    }
}
