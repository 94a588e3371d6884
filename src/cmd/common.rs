//! What several subcommands share: opening the backend the global options name (the key
//! checked first, and named in the error of a store that cannot be reached), the
//! owner `renew` and `unlock` require, and the run records `status` and `status --watch`
//! show.

use std::sync::Arc;

use crate::backend::spec::{self, BackendSpec};
use crate::backend::{Backend, LastRuns};
use crate::cli::Global;
use crate::config::check_key;
use crate::error::{Error, Result};

/// Checks `key` and opens the backend the global options name.
pub(super) async fn open(
    global: &Global,
    key: Option<&str>,
) -> Result<(BackendSpec, Arc<dyn Backend>)> {
    if let Some(key) = key {
        check_key(key)?;
    }
    let spec = BackendSpec::from_urls(&global.urls)?;
    let t0 = std::time::Instant::now();
    let backend = spec::open_exclusive(&spec)
        .await
        .map_err(|e| naming(key, e))?;
    let (d, ms) = (backend.describe(), t0.elapsed().as_millis() as u64);
    log::info!(target: "dlock", event = "connected", backend = d.as_str(), ms = ms; "connected to {d} in {ms}ms");
    Ok((spec, backend))
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
