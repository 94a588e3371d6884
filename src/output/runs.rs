//! How `status` shows a key's run records: `last run: ok (exit 0) 4m ago on ci-2, ran
//! 12.3s`, and the last success under a run that failed.

use serde::Serialize;

use super::time::{rfc3339_ms, short_duration};
use crate::backend::estimate::Estimate;
use crate::backend::{LastRuns, RunRecord};

/// A run record in `status --json`: the stored fields, plus how it ended in words and its
/// times in RFC 3339.
#[derive(Debug, Serialize)]
pub struct RunJson<'a> {
    #[serde(flatten)]
    pub run: &'a RunRecord,
    pub succeeded: bool,
    pub outcome: String,
    pub started_at: String,
    pub ended_at: String,
}

impl<'a> RunJson<'a> {
    pub fn new(run: &'a RunRecord) -> Self {
        RunJson {
            run,
            succeeded: run.succeeded(),
            outcome: run.outcome(),
            started_at: rfc3339_ms(run.started_at_ms),
            ended_at: rfc3339_ms(run.ended_at_ms),
        }
    }
}

/// The lines under a key's row, as of `now_ms`.
pub fn lines(runs: &LastRuns, now_ms: u64) -> Vec<String> {
    let Some(last) = &runs.last else {
        return match &runs.last_success {
            Some(ok) => vec![format!("  last success: {}", when(ok, now_ms))],
            None => vec!["  last run: none on record".to_string()],
        };
    };
    let mut out = vec![format!(
        "  last run: {} {}",
        last.outcome(),
        when(last, now_ms)
    )];
    if !last.succeeded() {
        out.push(match &runs.last_success {
            Some(ok) => format!("  last success: {}", when(ok, now_ms)),
            None => "  last success: never".to_string(),
        });
    }
    out
}

/// `4m ago on ci-2, ran 12.3s`.
fn when(run: &RunRecord, now_ms: u64) -> String {
    format!(
        "{} ago on {}, ran {}",
        ago(now_ms.saturating_sub(run.ended_at_ms)),
        run.holder.host,
        short_duration(run.ran_ms)
    )
}

/// `about 4m00s (runs take ~2m00s; the holder has run 1m10s)`, or `… the holder is overdue
/// by 30.0s)`: a waiter's expected wait, for the waiting line and `status`.
pub fn estimate(e: &Estimate) -> String {
    let about = match e.wait_ms {
        0 => "any moment now".to_string(),
        ms => format!("about {}", short_duration(ms)),
    };
    let typical = short_duration(e.typical_ms);
    let holder = match (e.overdue_ms, e.holder_ran_ms) {
        (Some(o), _) => format!("; the holder is overdue by {}", short_duration(o)),
        (None, Some(r)) => format!("; the holder has run {}", short_duration(r)),
        (None, None) => String::new(),
    };
    format!("{about} (runs take ~{typical}{holder})")
}

/// `12s`, `4m`, `2h`, `3d`: how long ago, to the unit that matters.
pub fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(code: i32, host: &str, ended: u64, ran: u64) -> RunRecord {
        let mut r = RunRecord {
            exit_code: code,
            ended_at_ms: ended,
            ran_ms: ran,
            ..RunRecord::default()
        };
        r.holder.host = host.into();
        r
    }

    #[test]
    fn the_last_success_shows_under_a_failure() {
        let now = 10_000_000;
        let ok = run(0, "ci-1", now - 2 * 3_600_000, 11_000);
        let bad = run(2, "ci-2", now - 240_000, 12_300);
        let runs = LastRuns::default().with(&ok);
        assert_eq!(
            lines(&runs, now),
            ["  last run: ok (exit 0) 2h ago on ci-1, ran 11.0s"]
        );
        assert_eq!(
            lines(&runs.with(&bad), now),
            [
                "  last run: failed (exit 2) 4m ago on ci-2, ran 12.3s",
                "  last success: 2h ago on ci-1, ran 11.0s"
            ]
        );
        let never = LastRuns::default().with(&bad);
        assert_eq!(lines(&never, now)[1], "  last success: never");
        assert_eq!(
            lines(&LastRuns::default(), now),
            ["  last run: none on record"]
        );
    }

    #[test]
    fn estimates_read_plainly() {
        let e = Estimate::new(120_000, 2, Some(70_000));
        assert_eq!(
            estimate(&e),
            "about 2m50s (runs take ~2m00s; the holder has run 1m10s)"
        );
        let late = Estimate::new(60_000, 1, Some(90_000));
        assert_eq!(
            estimate(&late),
            "any moment now (runs take ~1m00s; the holder is overdue by 30.0s)"
        );
    }
}
