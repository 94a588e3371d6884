//! The run record `exec` leaves in the store when CMD ends (see
//! [`crate::backend::runs`]): written while the lock is still held, bounded in time, and
//! never able to change `exec`'s exit code: a failure is one warning line.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::estimate::history_after;
use crate::backend::{Backend, Lease, RunRecord};
use crate::holder;

/// The longest `exec` waits for the record to be written: its command has already ended,
/// and a store that does not answer (the reason a lease was lost) must not hold up exit.
const PATIENCE: Duration = Duration::from_secs(1);

/// How CMD's run ended, as `exec` saw it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ending {
    /// CMD was started: one that could not be (126, 127) did not run.
    pub started: bool,
    /// The signal that killed CMD, if one did.
    pub signal: Option<i32>,
    /// Terminated for running past `--max-runtime`.
    pub timed_out: bool,
    /// Terminated because the lease was lost.
    pub lease_lost: bool,
    /// The lease was lost because the store stopped answering: it is not asked to record
    /// the run (it would not answer either), so that `exec` exits as soon as CMD is dead.
    pub store_silent: bool,
}

/// When the run happened, in milliseconds (waited, and CMD's start and end since the epoch),
/// and the key's last run before it, whose history this run's record carries on.
#[derive(Debug, Clone)]
pub struct Times {
    pub waited_ms: u64,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    pub previous: Option<RunRecord>,
}

/// The key's last run before ours, read in the background while CMD runs (the lock is
/// ours, so the previous holder's record is in): its history goes on in ours. A re-entered
/// lease records nothing, and a store that cannot tell in time leaves the history to
/// start again from this run.
pub fn previous(
    backend: &Arc<dyn Backend>,
    lease: &Lease,
) -> impl std::future::Future<Output = Option<RunRecord>> {
    let reading = (!lease.reentered).then(|| {
        let (backend, key) = (Arc::clone(backend), lease.key.clone());
        tokio::spawn(async move { backend.last_runs(&key).await.ok()?.last })
    });
    async move {
        let reading = reading?;
        match tokio::time::timeout(PATIENCE, reading).await {
            Ok(Ok(last)) => last,
            _ => None,
        }
    }
}

/// Records the run of `argv` under `lease` that ended with `exit_code`. A lease this
/// process re-entered belongs to an enclosing `exec`, which records the whole run.
/// `release_next`: the lock is released right after, and the store may write the record
/// with the release (see [`Backend::record_run_before_release`]).
pub async fn record(
    backend: &dyn Backend,
    lease: &Lease,
    (argv, exit_code): (&[String], u8),
    ending: Ending,
    times: Times,
    (quiet, release_next): (bool, bool),
) {
    if lease.reentered {
        return;
    }
    let key = lease.key.as_str();
    if ending.store_silent {
        if !quiet {
            crate::say!(
                "warning: the run of '{key}' was not recorded: {} is not answering",
                backend.describe()
            );
        }
        return;
    }
    let ran_ms = times.ended_at_ms.saturating_sub(times.started_at_ms);
    let mut who = holder::current(argv);
    who.acquired_at_ms = times.started_at_ms;
    let run = RunRecord {
        owner: lease.owner.clone(),
        fencing_token: lease.fencing_token,
        holder: who,
        started_at_ms: times.started_at_ms,
        ended_at_ms: times.ended_at_ms,
        exit_code: i32::from(exit_code),
        signal: ending.signal,
        waited_ms: times.waited_ms,
        ran_ms,
        recent_ms: history_after(times.previous.as_ref(), ran_ms),
        lease_lost: ending.lease_lost,
        timed_out: ending.timed_out,
    };
    let recorded = async {
        match release_next {
            true => backend.record_run_before_release(key, &run).await,
            false => backend.record_run(key, &run).await,
        }
    };
    let error = match tokio::time::timeout(PATIENCE, recorded).await {
        Ok(Ok(())) => {
            log::debug!(target: "dlock", event = "run_recorded", key = key;
                "recorded the run of '{key}'");
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {}", humantime::format_duration(PATIENCE)),
    };
    if !quiet {
        crate::say!(
            "warning: could not record the run of '{key}' on {}: {error}",
            backend.describe()
        );
    }
}
