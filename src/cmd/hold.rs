//! `exec --hold-at-least DUR`: when CMD ends before DUR has passed since the key was
//! acquired, the lease is left to expire by itself at acquisition + DUR instead of being
//! released, and dlock exits at once.
//!
//! Only the outermost `exec` holds on: a re-entered lease belongs to its parent, whose own
//! end decides. A run cut short by `--max-runtime` did run, so it holds on too; a lost
//! lease (79) has nothing left to hold, and a command that could not be started did not
//! run, so its lease is released as usual.

use std::time::{Duration, Instant};

use crate::backend::{Acquired, Backend, Lease};

/// When the hold ends, if this `exec` holds on: an outermost lease, with some of the
/// hold left now. Decided once, when CMD has ended; what is left is measured from this
/// instant when the lease is left held, after the run record was written.
pub fn until(hold: Option<Duration>, lease: &Lease, acquired_at: Instant) -> Option<Instant> {
    let until = acquired_at.checked_add(hold?)?;
    (!lease.reentered && until > Instant::now()).then_some(until)
}

/// Leaves the lease held until `until`: for what is left of the hold now, which writing
/// the run record has shortened. A failure only warns: the command already ran, and a
/// lease that could not be left held expires by itself (or is gone).
pub async fn linger(warn: bool, backend: &dyn Backend, acquired: Acquired, until: Instant) {
    let key = acquired.lease.key.clone();
    let left = until.saturating_duration_since(Instant::now());
    let left_ms = left.as_millis() as u64;
    match backend.linger(acquired, left).await {
        Ok(()) => {
            log::info!(target: "dlock", event = "held", key = key.as_str(), left_ms = left_ms;
                "left '{key}' held for {left_ms}ms more (--hold-at-least)");
        }
        Err(e) if warn => {
            crate::say!("warning: could not keep '{key}' held for --hold-at-least: {e}")
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(reentered: bool) -> Lease {
        Lease {
            key: "k".into(),
            owner: "o".into(),
            fencing_token: 1,
            ttl: Duration::from_secs(30),
            reentered,
            sent_at: Instant::now(),
            bound: false,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn only_an_outermost_hold_with_time_left_holds_on() {
        let now = Instant::now();
        let ten = Some(Duration::from_secs(10));
        let until = until(ten, &lease(false), now).expect("a hold is left");
        assert_eq!(until, now + Duration::from_secs(10), "from the acquisition");
        assert_eq!(super::until(ten, &lease(true), now), None, "re-entered");
        assert_eq!(super::until(None, &lease(false), now), None, "no hold");
        let long_ago = now - Duration::from_secs(11);
        assert_eq!(
            super::until(ten, &lease(false), long_ago),
            None,
            "ran longer"
        );
    }
}
