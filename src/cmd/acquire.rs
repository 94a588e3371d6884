//! What `exec` and `lock` share: building the request, waiting with signals, and turning
//! "not obtained" into the `-E` exit code.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::timeout;

use crate::backend::estimate::Estimate;
use crate::backend::{
    AcquireRequest, Acquired, Backend, LockInfo, ProgressFn, ReleaseMode, WaitInfo, WaitOptions,
    CANCEL_GRACE,
};
use crate::cli::{AcquireOpts, Global, IfUnavailable};
use crate::config::check_ttl;
use crate::env;
use crate::error::{Error, Result};
use crate::expect::Expectation;
use crate::output::WaitLine;
use crate::supervisor::Signals;
use crate::{holder, ids};

/// Most owner ids kept in `DLOCK_OWNERS`; deeper nesting than this is not sensible.
const MAX_OWNERS: usize = 16;

/// Builds the request for `key`, with a fresh owner id and the inherited ones for re-entry.
pub fn request(
    key: &str,
    opts: &AcquireOpts,
    command: &[String],
    detached: bool,
) -> Result<AcquireRequest> {
    Ok(AcquireRequest {
        key: key.to_string(),
        owner: ids::new_owner_id(),
        reenter: inherited_owners(),
        ttl: check_ttl(opts.ttl)?,
        holder: holder::current(command),
        detached,
        fair: !opts.no_fair,
        sharing: opts.sharing.sharing(),
        queue: opts.queueing(),
    })
}

/// The owner ids this process acts for, from `DLOCK_OWNER` and `DLOCK_OWNERS`.
pub fn inherited_owners() -> Vec<String> {
    let mut owners: Vec<String> = Vec::new();
    let vars = [env::OWNER, env::OWNERS].map(|v| std::env::var(v).unwrap_or_default());
    for id in vars.iter().flat_map(|v| v.split(',')).map(str::trim) {
        if !id.is_empty() && !owners.iter().any(|o| o == id) {
            owners.push(id.to_string());
        }
    }
    owners
}

/// The value of `DLOCK_OWNERS` for a child of the holder of `owner`.
pub fn owners_for_child(owner: &str) -> String {
    let mut all = vec![owner.to_string()];
    all.extend(inherited_owners().into_iter().filter(|o| o != owner));
    all.truncate(MAX_OWNERS);
    all.join(",")
}

/// When to stop waiting, for a wait beginning `now`: now for `--no-wait`, after
/// `--timeout`, or never.
pub fn deadline(opts: &AcquireOpts, now: Instant) -> Option<Instant> {
    if opts.no_wait {
        Some(now)
    } else {
        // A deadline past what the clock can count is no deadline.
        opts.timeout.and_then(|t| now.checked_add(t))
    }
}

/// Acquires while watching for signals: a signal cancels the wait and leaves nothing held.
async fn acquire(
    line: Option<WaitLine>,
    backend: &Arc<dyn Backend>,
    req: &AcquireRequest,
    opts: &AcquireOpts,
    started: Instant,
    signals: &mut Signals,
) -> Result<(Acquired, Option<Estimate>)> {
    let expect = Expectation::default();
    if let Some(line) = &line {
        line.connected(&backend.describe());
        line.expecting(&expect);
    }
    let wait = WaitOptions {
        progress: progress(line.as_ref(), backend, &req.key, &expect),
        since: started,
        ..WaitOptions::until(deadline(opts, started))
    };
    let attempt = backend.acquire(req, &wait);
    tokio::pin!(attempt);
    let signo = tokio::select! {
        result = &mut attempt => {
            drop(line);
            if result.is_ok() {
                expect.settle().await;
            }
            let estimate = expect.at_start();
            if let Ok(won) = &result {
                let (key, token) = (&req.key, won.lease.fencing_token);
                let waited = started.elapsed().as_millis() as u64;
                let estimated = estimate.map(|e| e.wait_ms);
                log::info!(target: "dlock", event = "acquired", key = key.as_str(), token = token, waited_ms = waited, estimated_ms = estimated;
                    "acquired '{key}': token {token}, waited {waited}ms{}", estimated_words(estimated));
            }
            return result.map(|won| (won, estimate));
        }
        sig = signals.recv() => sig,
    };
    drop(line);
    wait.cancel.cancel();
    // A backend winds up within CANCEL_GRACE of the cancel; the bound here only keeps a
    // signal from waiting on one that does not.
    if let Ok(Ok(won)) = timeout(2 * CANCEL_GRACE, attempt).await {
        // The grant raced the signal: give it back at once.
        let giving_back = backend.release(&req.key, &won.lease.owner, ReleaseMode::One);
        let _ = timeout(CANCEL_GRACE, giving_back).await;
    }
    Err(Error::Cancelled(
        format!(
            "waiting for '{}' on {} cancelled by {signo}",
            req.key,
            backend.describe()
        ),
        signo as i32,
    ))
}

/// `, about 4m expected` for the `acquired` event, when there was an estimate.
fn estimated_words(estimated_ms: Option<u64>) -> String {
    estimated_ms
        .map(|ms| format!(" (expected {ms}ms at the start)"))
        .unwrap_or_default()
}

/// The progress listener: the expected wait, the waiting line, and a `waiting` event
/// whenever the holder or our place changes (only when `-v` or JSON events are on).
fn progress(
    line: Option<&WaitLine>,
    backend: &Arc<dyn Backend>,
    key: &str,
    expect: &Expectation,
) -> Option<ProgressFn> {
    let line = line.map(WaitLine::progress);
    let logging = log::log_enabled!(target: "dlock", log::Level::Info);
    let (backend, key, expect) = (Arc::clone(backend), key.to_string(), expect.clone());
    Some(Arc::new(move |info: &WaitInfo| {
        expect.heard(info, &backend, &key);
        if let Some(line) = &line {
            line(info);
        }
        if !logging {
            return;
        }
        let holder = info
            .holder
            .as_ref()
            .map(LockInfo::describe)
            .unwrap_or_default();
        let position = info.position.unwrap_or(0);
        let estimated = expect.now(info).map(|e| e.wait_ms);
        log::info!(target: "dlock", event = "waiting", key = key.as_str(), holder = holder.as_str(), position = position, estimated_ms = estimated;
            "waiting for '{key}': held by {holder}, position {position}");
    }))
}

/// The result of [`connect_and_acquire`].
pub enum Acquisition {
    /// The lease is ours, from this backend; and the wait expected at its start, when the
    /// key had a history and we waited.
    Held(Arc<dyn Backend>, Acquired, Option<Estimate>),
    /// Not obtained (already reported on stderr): exit with this code.
    NotObtained(u8),
}

/// What `exec` and `lock` do first: connect (a signal cancels it) and acquire `key` as
/// `opts` say, for the `command` shown to others.
pub async fn connect_and_acquire(
    global: &Global,
    key: &str,
    opts: &AcquireOpts,
    command: &[String],
    detached: bool,
    signals: &mut Signals,
) -> Result<Acquisition> {
    let req = request(key, opts, command, detached)?;
    acquire_request(global, req, opts, signals).await
}

/// [`connect_and_acquire`] for a request already built (`elect` adds its proclamation).
pub async fn acquire_request(
    global: &Global,
    req: AcquireRequest,
    opts: &AcquireOpts,
    signals: &mut Signals,
) -> Result<Acquisition> {
    let key = req.key.as_str();
    let line = WaitLine::start(global, key, &super::common::named(global));
    // The time allowed counts from here: connecting to a store that is not there yet
    // takes from it, as waiting for the key does.
    let started = Instant::now();
    let allowed = if opts.no_wait {
        Some(Duration::ZERO)
    } else {
        opts.timeout
    };
    let until = super::common::ride_out_until(started, allowed);
    let backend = tokio::select! {
        opened = super::common::open(global, Some(key), until) => match opened {
            Ok((_, backend)) => backend,
            Err(e) => return conflict_code(global, opts, key, e).map(Acquisition::NotObtained),
        },
        sig = signals.recv() => {
            drop(line);
            let msg = format!("cancelled by {sig} while connecting for '{key}'");
            return Err(Error::Cancelled(msg, sig as i32));
        }
    };
    match acquire(line, &backend, &req, opts, started, signals).await {
        Ok((acquired, estimate)) => Ok(Acquisition::Held(backend, acquired, estimate)),
        Err(e) => {
            let e = super::common::naming(Some(key), e);
            conflict_code(global, opts, key, e).map(Acquisition::NotObtained)
        }
    }
}

/// Turns "not obtained" — and, with `--if-unavailable skip`, "backend unavailable" — into
/// the `-E` exit code (printing the reason unless `-q`), and passes every other outcome
/// through.
fn conflict_code(global: &Global, opts: &AcquireOpts, key: &str, err: Error) -> Result<u8> {
    let msg = match err {
        Error::NotObtained(msg) => msg,
        Error::Unavailable(msg) | Error::Transient(msg)
            if opts.if_unavailable == IfUnavailable::Skip =>
        {
            format!("skipped '{key}' (--if-unavailable skip): {msg}")
        }
        other => return Err(other),
    };
    if !global.quiet {
        crate::say!("{msg}");
    }
    Ok(opts.conflict_exit_code)
}
