//! Reaching a store: the one rule for a store that cannot be reached yet, on every store.
//! Each store only says whether its failure may pass ([`Error::Transient`]: refused, reset
//! or timed out connections, an ensemble without a leader) or will not (refused
//! credentials, a missing database, a protocol mismatch); this tries again with the one
//! back-off until the time the caller allowed ([`super::pace::ride_out_within`]).

use std::future::Future;

use tokio::time::Instant;

use super::pace::{backoff, LATE};
use crate::error::{Error, Result};

/// Runs `open` until it succeeds, fails for good, or `until` has come; a try that has not
/// answered by [`LATE`] past `until` is dropped. `name` names the store (redacted)
/// in the error of that try. A try that began before `until` and failed after it is
/// followed by one more: a server that was starting when it was tried (listening, not
/// answering yet: a ZooKeeper server) may have come up meanwhile, and the ride-out
/// promises a try at its end.
pub async fn reach<T, F, Fut>(name: &str, until: std::time::Instant, mut open: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let until = Instant::from_std(until);
    let late = until.checked_add(LATE).unwrap_or(until);
    let mut last: Option<Error> = None;
    for round in 0u32.. {
        let began = Instant::now();
        let tried = tokio::time::timeout_at(late, open()).await;
        let e = match tried {
            Ok(Ok(opened)) => return Ok(opened),
            Ok(Err(e)) => e,
            Err(_) => return Err(no_answer(name, last)),
        };
        let left = until.saturating_duration_since(Instant::now());
        if !e.is_retryable() || (left.is_zero() && began >= until) {
            return Err(e);
        }
        if round == 0 {
            let left = humantime::format_duration(std::time::Duration::from_millis(
                left.as_millis() as u64,
            ));
            log::warn!(target: "dlock", event = "store_unreachable", backend = name, error = e.to_string().as_str();
                "{e}; trying again for up to {left}");
        }
        last = Some(e);
        tokio::time::sleep(backoff(round).min(left)).await;
    }
    unreachable!("the tries of a connection are counted in u32")
}

/// The error of a try that did not answer in time: what the last one said, if any.
fn no_answer(name: &str, last: Option<Error>) -> Error {
    let why = last
        .map(|e| format!("; it last said: {e}"))
        .unwrap_or_default();
    Error::Unavailable(format!(
        "{name}: cannot connect: no answer by the end of the time allowed{why}"
    ))
}
