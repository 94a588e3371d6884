//! What several subcommands share: opening the backend the global options name (the key
//! checked first, and named in the error of a store that cannot be reached), the
//! owner `renew` and `unlock` require, and the run records `status` and `status --watch`
//! show.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::spec::{self, BackendSpec};
use crate::backend::waiting;
use crate::backend::{Backend, LastRuns};
use crate::cli::Global;
use crate::config::{check_key, redact_url};
use crate::error::{Error, Result};

/// Checks `key` and opens the backend the global options name, trying again while it
/// cannot be reached for a reason that may pass, until `until` (see
/// [`ride_out_within`](crate::backend::waiting::ride_out_within)).
pub(super) async fn open(
    global: &Global,
    key: Option<&str>,
    until: Instant,
) -> Result<(BackendSpec, Arc<dyn Backend>)> {
    if let Some(key) = key {
        check_key(key)?;
    }
    let spec = BackendSpec::from_urls(&global.urls)?;
    let t0 = Instant::now();
    let name = named(global);
    let backend = waiting::reach(&name, until, || spec::open_exclusive(&spec))
        .await
        .map_err(|e| naming(key, e))?;
    let (d, ms) = (backend.describe(), t0.elapsed().as_millis() as u64);
    log::info!(target: "dlock", event = "connected", backend = d.as_str(), ms = ms; "connected to {d} in {ms}ms");
    Ok((spec, backend))
}

/// [`open`], and a store that connects on its first request connected too, for a command
/// whose request is sent only once or is not tried again (`unlock`, `leader`): reaching
/// the store is ridden out until `until`, the request is not (see docs/waiting.md).
pub(super) async fn open_ready(
    global: &Global,
    key: &str,
    until: Instant,
) -> Result<(BackendSpec, Arc<dyn Backend>)> {
    let (spec, backend) = open(global, Some(key), until).await?;
    waiting::reach(&backend.describe(), until, || backend.ready(key))
        .await
        .map_err(|e| naming(Some(key), e))?;
    Ok((spec, backend))
}

/// The store the global options name, for messages before it is connected (passwords
/// hidden).
pub(super) fn named(global: &Global) -> String {
    if global.urls.is_empty() {
        return "the local store".into();
    }
    let urls: Vec<String> = global.urls.iter().map(|u| redact_url(u)).collect();
    urls.join(",")
}

/// When a command that began at `started` and allows `allowed` (see
/// [`waiting::ride_out_within`]) stops trying a store that cannot be reached. A time
/// past what the clock can count is no limit, as for the deadline of a wait.
pub(super) fn ride_out_until(started: Instant, allowed: Option<Duration>) -> Instant {
    let within = waiting::ride_out_within(allowed);
    started
        .checked_add(within)
        .unwrap_or_else(|| started + waiting::ride_out_within(None))
}

/// [`ride_out_until`] for a one-shot command (`status`, `unlock`, `renew`, `leader`): it
/// allows no wait, so the store gets the least ride-out.
pub(super) fn one_shot() -> Instant {
    ride_out_until(Instant::now(), Some(Duration::ZERO))
}

/// A store that cannot be reached is named by its own error; the key the command was for
/// is added, so that the one line says both (on connecting, and when the store goes away
/// during a wait).
pub(super) fn naming(key: Option<&str>, e: Error) -> Error {
    match (key, e) {
        (Some(k), e @ (Error::Unavailable(_) | Error::Transient(_)))
            if !e.to_string().contains(&format!("'{k}'")) =>
        {
            e.map_message(|m| format!("lock '{k}': {m}"))
        }
        (_, e) => e,
    }
}

/// The owner id from `--owner`/`DLOCK_OWNER`, required by `renew` and `unlock`.
pub(super) fn required_owner(owner: Option<String>, key: &str) -> Result<String> {
    match owner {
        Some(o) if !o.trim().is_empty() => Ok(o.trim().to_string()),
        _ => Err(Error::Usage(format!(
            "no owner for '{key}': pass --owner ID (printed by `dlock lock`) or set DLOCK_OWNER"
        ))),
    }
}

/// The run records of the named keys, in order (none for a listing). A key whose records
/// cannot be read gets `None` and, when `warn`, a warning: they are not what `status`
/// is asked first, and must not hide who holds the lock.
pub async fn last_runs(
    backend: &dyn Backend,
    keys: &[String],
    warn: bool,
) -> Vec<Option<LastRuns>> {
    let mut all = Vec::with_capacity(keys.len());
    for key in keys {
        all.push(match backend.last_runs(key).await {
            Ok(r) => Some(r),
            Err(e) => {
                if warn {
                    crate::say!(
                        "warning: cannot read the last run of '{key}' on {}: {e}",
                        backend.describe()
                    );
                }
                None
            }
        });
    }
    all
}
