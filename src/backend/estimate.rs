//! The expected wait, decided once for every store: each run record carries the durations
//! of the key's last runs ([`HISTORY`] at most), and a waiter's estimate is made from their
//! median, its place in the queue and how long the holder has run.
//!
//! The median, not the mean: one run that hung for an hour must not make every later
//! estimate absurd. Without history there is no estimate, and none is ever negative: a
//! holder past the usual duration is "overdue", and the wait counts from its end.

use serde::Serialize;

use super::{LastRuns, RunRecord};

/// How many run durations a record keeps: enough for a median that one odd run does not
/// move, few enough that the record stays a few hundred bytes.
pub const HISTORY: usize = 20;

/// The durations to store with a run that took `ran_ms`, after `previous` (the key's last
/// run, if any): its history (or its one duration, for a record written before histories
/// were kept), then this run, the oldest dropped beyond [`HISTORY`].
pub fn history_after(previous: Option<&RunRecord>, ran_ms: u64) -> Vec<u64> {
    let mut all = previous.map(durations_of).unwrap_or_default();
    all.push(ran_ms);
    let extra = all.len().saturating_sub(HISTORY);
    all.drain(..extra);
    all
}

/// The durations a record tells of, oldest first.
fn durations_of(run: &RunRecord) -> Vec<u64> {
    if run.recent_ms.is_empty() {
        vec![run.ran_ms]
    } else {
        run.recent_ms.clone()
    }
}

/// How long a run of the key usually takes: the median of the last runs' durations;
/// `None` without any run on record.
pub fn typical(runs: &LastRuns) -> Option<u64> {
    let mut all = runs.last.as_ref().map(durations_of)?;
    all.sort_unstable();
    let mid = all.len() / 2;
    Some(match all.len() % 2 {
        1 => all[mid],
        _ => (all[mid - 1] + all[mid]) / 2,
    })
}

/// A waiter's expected wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Estimate {
    /// How long until this waiter should get the key.
    pub wait_ms: u64,
    /// How long a run usually takes (the median).
    pub typical_ms: u64,
    /// How long the holder has run, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_ran_ms: Option<u64>,
    /// How far the holder is past the usual duration, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overdue_ms: Option<u64>,
}

impl Estimate {
    /// The wait of the waiter at `position` (1 = next) when runs take `typical_ms` and the
    /// holder has run `holder_ran_ms`: what is left of the holder's run, then one run per
    /// waiter ahead. A holder past the usual time is taken to end any moment now.
    pub fn new(typical_ms: u64, position: u64, holder_ran_ms: Option<u64>) -> Estimate {
        let ran = holder_ran_ms.unwrap_or(0);
        let left = typical_ms.saturating_sub(ran);
        let overdue = holder_ran_ms
            .filter(|&r| r > typical_ms)
            .map(|r| r - typical_ms);
        let ahead = position.saturating_sub(1);
        Estimate {
            wait_ms: left.saturating_add(ahead.saturating_mul(typical_ms)),
            typical_ms,
            holder_ran_ms,
            overdue_ms: overdue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ran: u64, recent: Vec<u64>) -> RunRecord {
        RunRecord {
            ran_ms: ran,
            recent_ms: recent,
            ..RunRecord::default()
        }
    }

    #[test]
    fn the_history_keeps_the_last_runs() {
        assert_eq!(history_after(None, 5), vec![5]);
        let old = record(7, Vec::new());
        assert_eq!(history_after(Some(&old), 5), vec![7, 5]);
        let full = record(19, (0..20).collect());
        let next = history_after(Some(&full), 99);
        assert_eq!(next.len(), HISTORY);
        assert_eq!((next[0], next[19]), (1, 99));
    }

    #[test]
    fn the_typical_run_is_the_median() {
        assert_eq!(typical(&LastRuns::default()), None);
        let runs = LastRuns::default().with(&record(3, vec![1, 1000, 3]));
        assert_eq!(typical(&runs), Some(3));
        let runs = LastRuns::default().with(&record(4, vec![2, 4]));
        assert_eq!(typical(&runs), Some(3));
    }

    #[test]
    fn estimates_are_never_negative() {
        let e = Estimate::new(120_000, 2, Some(70_000));
        assert_eq!(e.wait_ms, 50_000 + 120_000);
        assert_eq!(e.overdue_ms, None);
        let late = Estimate::new(60_000, 1, Some(90_000));
        assert_eq!((late.wait_ms, late.overdue_ms), (0, Some(30_000)));
        let second = Estimate::new(60_000, 2, Some(90_000));
        assert_eq!(second.wait_ms, 60_000);
    }
}
