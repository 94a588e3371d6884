//! `dlock exec KEY -- CMD`: run CMD while holding KEY.
//!
//! The sequence: catch signals, connect, acquire (a signal cancels the wait), spawn CMD in
//! its own process group, keep the lease alive in the background while forwarding signals,
//! and when CMD ends release the lease and exit with CMD's code. If the lease cannot be
//! kept, CMD's group is terminated before the lease can expire and we exit 79.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

use super::acquire::{self, Acquisition};
use super::hold;
use super::record::{self, Ending, Times};
use crate::backend::{AcquireRequest, Acquired, Backend, Lease, ReleaseMode};
use crate::cli::{AcquireOpts, ExecArgs, Global};
use crate::credentials;
use crate::error::{Error, Result};
use crate::lease::Schedule;
use crate::supervisor::{self, Caught, Signals, Supervised};
use crate::{env, exit, metrics};

/// What the keeper tells the supervisor when the lease is in danger.
#[derive(Debug)]
enum Doom {
    /// Renewal kept failing: SIGTERM now, SIGKILL follows.
    Term {
        why: String,
        /// The store stopped answering; not when the last try was made by a dlock resumed
        /// past its deadline, which the store had too little time to answer.
        silent: bool,
    },
    /// The lease is (about to be) gone: SIGKILL now.
    Kill(String),
}

/// Runs the whole `exec` sequence and returns dlock's exit code.
pub async fn run(global: &Global, args: ExecArgs) -> Result<u8> {
    let mut signals = Signals::catch()?;
    let argv = args.argv();
    let job = Job {
        key: &args.key,
        acquire: &args.acquire,
        request: acquire::request(&args.key, &args.acquire, &argv, false)?,
        argv,
        value: None,
        limit: Limit {
            max_runtime: args.max_runtime,
            kill_after: args.kill_after,
        },
        hold_at_least: args.hold_at_least,
        metrics_file: args.metrics_file.as_deref(),
        lost_terms: None,
    };
    run_job(global, job, &mut signals).await
}

/// One run of CMD under a key: what `exec` does once, and `elect` once per term.
pub(super) struct Job<'a> {
    pub key: &'a str,
    pub acquire: &'a AcquireOpts,
    /// The request to acquire with (a fresh owner id each time).
    pub request: AcquireRequest,
    pub argv: Vec<String>,
    /// A leader's proclamation, given to CMD as `DLOCK_LEADER_VALUE`.
    pub value: Option<String>,
    pub limit: Limit,
    pub hold_at_least: Option<Duration>,
    pub metrics_file: Option<&'a std::path::Path>,
    /// `elect`: the terms lost before this one, counted in the metrics file.
    pub lost_terms: Option<u64>,
}

/// Acquires `job.key`, runs CMD while holding it, records the run and releases; returns
/// dlock's exit code (`Err(LeaseLost)` when the lease was lost and CMD terminated).
pub(super) async fn run_job(global: &Global, job: Job<'_>, signals: &mut Signals) -> Result<u8> {
    let asked = Instant::now();
    let acquisition = acquire::acquire_request(global, job.request.clone(), job.acquire, signals);
    let (backend, acquired, estimate) = match acquisition.await? {
        Acquisition::Held(backend, acquired, estimate) => (backend, acquired, estimate),
        Acquisition::NotObtained(code) => return Ok(code),
    };
    let previous = record::previous(&backend, &acquired.lease);
    let (waited, started_ms, acquired_at) =
        (asked.elapsed(), crate::backend::now_ms(), Instant::now());
    let mut ending = Ending::default();
    let gone = crate::backend::session_lock::gone_of(&acquired);
    let outcome = run_child(
        global,
        &backend,
        &acquired.lease,
        (&job, &mut ending, gone),
        signals,
    )
    .await;
    let ended_ms = crate::backend::now_ms();
    // A lost lease is not ours to release (and its server may be the one not answering).
    let lost = matches!(outcome, Err(Error::LeaseLost(_)));
    ending.lease_lost = lost;
    let code = outcome.as_ref().map_or_else(Error::exit_code, |c| *c);
    let times = Times {
        waited_ms: waited.as_millis() as u64,
        started_at_ms: started_ms,
        ended_at_ms: ended_ms,
        previous: previous.await,
    };
    // Recorded before the release, so that the next holder's record comes after ours.
    let lease = &acquired.lease;
    // A command that could not be started did not run: nothing to hold off.
    let hold_until = hold::until(
        job.hold_at_least.filter(|_| ending.started),
        lease,
        acquired_at,
    );
    let how = (global.quiet, !lost && hold_until.is_none());
    record::record(&*backend, lease, (&job.argv, code), ending, times, how).await;
    match hold_until {
        _ if lost => {}
        Some(until) => hold::linger(!global.quiet, &*backend, acquired, until).await,
        None => release(!global.quiet, &*backend, acquired).await,
    }
    let run = metrics::Run {
        key: job.key.to_string(),
        started: started_ms as f64 / 1000.0,
        ended: ended_ms as f64 / 1000.0,
        waited_s: waited.as_secs_f64(),
        expected_wait_s: estimate.map(|e| e.wait_ms as f64 / 1000.0),
        ran_s: ended_ms.saturating_sub(started_ms) as f64 / 1000.0,
        exit_code: code,
        lease_lost: lost,
        lost_terms: job.lost_terms.map(|n| n + u64::from(lost)),
    };
    write_metrics(global, job.metrics_file, &run);
    outcome
}

/// Writes the metrics of `run` where `--metrics-file` or `DLOCK_METRICS_DIR` says, if
/// anywhere; a failure only warns.
fn write_metrics(global: &Global, explicit: Option<&std::path::Path>, run: &metrics::Run) {
    let Some(path) = metrics::path_for(explicit, &run.key) else {
        return;
    };
    if let Err(e) = metrics::write(&path, run) {
        if !global.quiet {
            crate::say!("warning: {e}");
        }
    }
}

/// Spawns CMD and supervises it until it ends; the lease is still held on return.
async fn run_child(
    global: &Global,
    backend: &Arc<dyn Backend>,
    lease: &Lease,
    (job, ending, gone): (&Job<'_>, &mut Ending, Option<CancellationToken>),
    signals: &mut Signals,
) -> Result<u8> {
    let limit = job.limit;
    let (mut env, url_fd) = child_env(global, lease)?;
    if let Some(value) = &job.value {
        env.push((env::LEADER_VALUE, value.clone()));
    }
    let spawned = supervisor::spawn(&job.argv, &env);
    drop(url_fd); // the command has its own copy now
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            crate::say!("{} (lock '{}' released)", e.message, lease.key);
            return Ok(e.code);
        }
    };
    ending.started = true;
    let (tx, rx) = mpsc::channel(2);
    let keeper = tokio::spawn(keep_or_gone(Arc::clone(backend), lease.clone(), tx, gone));
    let started = Instant::now();
    let result = supervise(child, signals, rx, limit).await;
    keeper.abort();
    let ended = result?;
    log_end(&lease.key, &ended, started.elapsed());
    match ended {
        Ended::Exited(code, signal) => {
            ending.signal = signal;
            Ok(code)
        }
        Ended::TooLong => {
            ending.timed_out = true;
            if !global.quiet {
                let d = humantime::format_duration(limit.max_runtime.unwrap_or_default());
                crate::say!(
                    "the command under '{}' ran longer than --max-runtime {d} and was terminated",
                    lease.key
                );
            }
            Ok(exit::TIMED_OUT)
        }
        Ended::LeaseLost(why, silent) => {
            ending.store_silent = silent;
            Err(Error::LeaseLost(format!(
                "lost the lease on '{}' ({}): {why}; the command was terminated",
                lease.key,
                backend.describe()
            )))
        }
    }
}

/// The `exited` event (`-v`): how CMD ended and how long it ran.
fn log_end(key: &str, ended: &Ended, ran: Duration) {
    let ran_ms = ran.as_millis() as u64;
    match ended {
        Ended::Exited(code, _) => {
            log::info!(target: "dlock", event = "exited", key = key, code = *code, ran_ms = ran_ms;
                "the command under '{key}' exited with {code} after {ran_ms}ms");
        }
        Ended::TooLong => {
            log::warn!(target: "dlock", event = "exited", key = key, code = exit::TIMED_OUT, ran_ms = ran_ms;
                "the command under '{key}' was terminated for running too long, after {ran_ms}ms");
        }
        Ended::LeaseLost(why, _) => {
            log::error!(target: "dlock", event = "lease_lost", key = key, error = why.as_str(), ran_ms = ran_ms;
                "lost the lease on '{key}' after {ran_ms}ms: {why}");
        }
    }
}

/// How long CMD may run (`--max-runtime`, `--kill-after`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Limit {
    pub max_runtime: Option<Duration>,
    pub kill_after: Duration,
}

/// How the supervised command ended.
enum Ended {
    /// CMD's exit code (128+N for signal N), and the signal that killed it.
    Exited(u8, Option<i32>),
    /// Terminated for running longer than `--max-runtime`.
    TooLong,
    /// Terminated because the lease was in danger, and why.
    /// Also whether the store had stopped answering (renewals kept failing) rather than
    /// said that the lease is gone.
    LeaseLost(String, bool),
}

/// Variables set in CMD's environment.
type ChildEnv = Vec<(&'static str, String)>;

/// The variables CMD gets: the contract's three, the ancestry for re-entry, and the
/// backend so that nested `dlock` calls talk to the same store, without its passwords
/// (see [`credentials`]); and the descriptor that carries them, to keep open until spawned.
fn child_env(global: &Global, lease: &Lease) -> Result<(ChildEnv, Option<OwnedFd>)> {
    let mut env = vec![
        (env::KEY, lease.key.clone()),
        (env::FENCING_TOKEN, lease.fencing_token.to_string()),
        (env::OWNER, lease.owner.clone()),
        (env::OWNERS, acquire::owners_for_child(&lease.owner)),
    ];
    let mut url_fd = None;
    if !global.urls.is_empty() {
        let backend = credentials::for_child(&global.urls)?;
        env.extend(backend.env());
        url_fd = backend.fd;
    }
    Ok((env, url_fd))
}

/// Forwards signals, acts on lease trouble and enforces `limit` until the child ends.
async fn supervise(
    mut sup: Supervised,
    signals: &mut Signals,
    mut doom: mpsc::Receiver<Doom>,
    limit: Limit,
) -> Result<Ended> {
    let mut lost = None;
    let started = Instant::now();
    let mut term_at = limit.max_runtime.and_then(|d| started.checked_add(d));
    let (mut kill_at, mut cut_short) = (None, false);
    let _terminal = supervisor::Foreground::give(sup.pgid);
    loop {
        tokio::select! {
            caught = signals.next() => match caught {
                Caught::Forward(sig) => supervisor::signal_group(sup.pgid, sig),
                Caught::Child => {
                    let status = sup.child.try_wait().map_err(|e| {
                        Error::Internal(format!("waiting for the command: {e}"))
                    })?;
                    let Some(status) = status else { continue };
                    if lost.is_some() || cut_short {
                        // Leave nothing of the group running on a lease we no longer hold,
                        // or of a run that was cut short.
                        supervisor::signal_group(sup.pgid, Signal::SIGKILL);
                    }
                    return Ok(match (lost, cut_short) {
                        (Some((why, silent)), _) => Ended::LeaseLost(why, silent),
                        (None, true) => Ended::TooLong,
                        (None, false) => {
                            use std::os::unix::process::ExitStatusExt;
                            Ended::Exited(supervisor::exit_code(status), status.signal())
                        }
                    });
                }
            },
            Some(d) = doom.recv() => {
                let (sig, why, silent) = match d {
                    Doom::Term { why, silent } => (Signal::SIGTERM, why, silent),
                    Doom::Kill(why) => (Signal::SIGKILL, why, false),
                };
                supervisor::signal_group(sup.pgid, sig);
                lost.get_or_insert((why, silent));
            }
            _ = sleep_until_some(term_at) => {
                supervisor::signal_group(sup.pgid, Signal::SIGTERM);
                (term_at, cut_short) = (None, true);
                kill_at = Instant::now().checked_add(limit.kill_after);
            }
            _ = sleep_until_some(kill_at) => {
                supervisor::signal_group(sup.pgid, Signal::SIGKILL);
                kill_at = None;
            }
        }
    }
}

/// Sleeps until `at`, or forever when there is none.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Renews the lease every TTL/3. When renewal keeps failing with [`Error::Transient`]
/// failures, sends `Term` in time for the child to be dead (`Kill`) before the lease may
/// expire; when it fails otherwise (the lease gone, credentials refused), `Kill` at once.
/// A bound lease cannot expire while we live: only the backend's word that it is gone
/// ends it.
async fn keep_alive(backend: Arc<dyn Backend>, lease: Lease, tx: mpsc::Sender<Doom>) {
    if lease.bound {
        return keep_bound(backend, lease, tx).await;
    }
    let plan = Schedule::for_ttl(lease.ttl);
    let mut last_ok = lease.sent_at;
    let mut next = last_ok + plan.renew_every;
    let mut last_error = String::new();
    let mut late = false;
    loop {
        let term_at = plan.term_at(last_ok, lease.ttl);
        if next >= term_at {
            break;
        }
        sleep_until(next.into()).await;
        let sent = Instant::now();
        late = sent >= term_at;
        // Woken past the deadline (this process was stopped): one short try still tells
        // whether the lease survived, since the server renews only a lease that is ours.
        let limit = if sent < term_at {
            (sent + plan.request_timeout()).min(term_at)
        } else {
            sent + plan.retry_every
        };
        match timeout_at(
            limit.into(),
            backend.renew(&lease.key, &lease.owner, lease.ttl),
        )
        .await
        {
            Ok(Ok(_)) => {
                log_renewed(&lease.key, sent.elapsed());
                last_ok = sent;
                next = sent + plan.renew_every;
                continue;
            }
            // The one rule of waiting: what may pass is tried again within the lease;
            // anything else (the lease gone, a password refused) ends the hold now.
            Ok(Err(e)) if !e.is_retryable() => {
                let _ = tx.send(Doom::Kill(fatal_renewal(e))).await;
                return;
            }
            Ok(Err(e)) => last_error = e.to_string(),
            Err(_) => last_error = "renewal timed out".into(),
        }
        let key = lease.key.as_str();
        log::warn!(target: "dlock", event = "renewal_failed", key = key, error = last_error.as_str();
            "renewing '{key}' failed, retrying: {last_error}");
        next = Instant::now() + plan.retry_every;
    }
    let why = match late {
        true => format!("dlock was stopped past the lease's deadline ({last_error})"),
        false => format!("renewal kept failing ({last_error})"),
    };
    sleep_until(plan.term_at(last_ok, lease.ttl).into()).await;
    let silent = !late;
    let _ = tx
        .send(Doom::Term {
            why: why.clone(),
            silent,
        })
        .await;
    sleep_until(plan.kill_at(last_ok, lease.ttl).into()).await;
    let _ = tx.send(Doom::Kill(why)).await;
}

/// Why a renewal that failed for good ends the hold. The lease is gone or not ours: the
/// store's word. Anything else (refused credentials, a dropped database) says why it will
/// not pass, so that the one line tells what to fix.
fn fatal_renewal(e: Error) -> String {
    match e {
        Error::NotOwner(_) | Error::LeaseLost(_) => e.to_string(),
        e => format!("renewal failed and will not pass by trying again ({e})"),
    }
}

/// [`keep_alive`], and for a lock held by a session of dlock's (see
/// [`crate::backend::session_lock`]), `Kill` the moment that session ends: the server
/// releases its lock then, not at the end of a TTL.
async fn keep_or_gone(
    backend: Arc<dyn Backend>,
    lease: Lease,
    tx: mpsc::Sender<Doom>,
    gone: Option<CancellationToken>,
) {
    let Some(gone) = gone else {
        return keep_alive(backend, lease, tx).await;
    };
    tokio::select! {
        _ = keep_alive(backend, lease, tx.clone()) => {}
        _ = gone.cancelled() => {
            let why = "the server ended the session that held the lock".to_string();
            let _ = tx.send(Doom::Kill(why)).await;
        }
    }
}

/// The `renewed` event (`-vv`), with the round trip.
fn log_renewed(key: &str, rtt: Duration) {
    let rtt_us = rtt.as_micros() as u64;
    log::debug!(target: "dlock", event = "renewed", key = key, rtt_us = rtt_us;
        "renewed '{key}' ({rtt_us}µs round trip)");
}

/// Checks a bound lease every TTL/3 for a release by someone else (`unlock --force`).
/// A check that fails or hangs (the store busy) is tried again later: it cannot mean
/// that the lease expired.
async fn keep_bound(backend: Arc<dyn Backend>, lease: Lease, tx: mpsc::Sender<Doom>) {
    let plan = Schedule::for_ttl(lease.ttl);
    loop {
        sleep_until((Instant::now() + plan.renew_every).into()).await;
        let check = backend.renew(&lease.key, &lease.owner, lease.ttl);
        let sent = Instant::now();
        match tokio::time::timeout(plan.renew_every, check).await {
            Ok(Ok(_)) => log_renewed(&lease.key, sent.elapsed()),
            Ok(Err(e @ Error::NotOwner(_))) => {
                let _ = tx.send(Doom::Kill(e.to_string())).await;
                return;
            }
            _ => {}
        }
    }
}

/// Releases the lease (one level when we re-entered it, entirely otherwise). A failure
/// only warns: the command already ran, and the lease will expire by itself.
async fn release(warn: bool, backend: &dyn Backend, acquired: Acquired) {
    let lease = &acquired.lease;
    let mode = if lease.reentered {
        ReleaseMode::One
    } else {
        ReleaseMode::All
    };
    let key = lease.key.clone();
    match backend.release_acquired(acquired, mode).await {
        Ok(()) => {
            log::info!(target: "dlock", event = "released", key = key.as_str(); "released '{key}'")
        }
        Err(e) if warn => crate::say!("warning: could not release '{key}': {e}"),
        Err(_) => {}
    }
}
