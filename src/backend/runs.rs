//! The record of a key's finished runs, kept in the same store as its lock so that
//! `status KEY` can say when the job last ran and last succeeded, from any host.
//!
//! A store keeps two records per key, each written whole: the last run, and the last
//! run that succeeded (written only by a run that succeeded). `exec` writes them while
//! it still holds the lock, so the records of one key are written one run at a time and
//! the last written is the last run; a run that lost its lease writes without that
//! guarantee (another holder may already be running). Stores that cannot write both
//! atomically may keep a `last_success` older than `last` for a moment: readers only
//! ever see whole records.

use super::{LastRuns, RunRecord};

impl RunRecord {
    /// A run succeeded when CMD exited 0 with its lease intact.
    pub fn succeeded(&self) -> bool {
        self.exit_code == 0 && self.signal.is_none() && !self.lease_lost && !self.timed_out
    }

    /// `ok (exit 0)`, `failed (exit 3)`, `lease lost (exit 79)`, `killed by signal 9 (exit
    /// 137)`, `too long (exit 124)`: how the run ended, for `status`.
    pub fn outcome(&self) -> String {
        let code = self.exit_code;
        if self.succeeded() {
            format!("ok (exit {code})")
        } else if self.lease_lost {
            format!("lease lost (exit {code})")
        } else if self.timed_out {
            format!("ran too long (exit {code})")
        } else if let Some(sig) = self.signal {
            format!("killed by signal {sig} (exit {code})")
        } else {
            format!("failed (exit {code})")
        }
    }

    /// The newer of two records: the later end, then the larger token.
    pub fn newer(a: Option<RunRecord>, b: Option<RunRecord>) -> Option<RunRecord> {
        match (a, b) {
            (Some(a), Some(b)) => {
                let key = |r: &RunRecord| (r.ended_at_ms, r.fencing_token);
                Some(if key(&b) > key(&a) { b } else { a })
            }
            (a, b) => a.or(b),
        }
    }

    /// The record as stored: JSON.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored record; `None` for anything that is not one (a damaged or foreign value
    /// is no run, and must not fail `status`).
    pub fn decode(bytes: &[u8]) -> Option<RunRecord> {
        serde_json::from_slice(bytes).ok()
    }
}

impl LastRuns {
    /// What remains after `run` is recorded on top of `self`.
    pub fn with(self, run: &RunRecord) -> LastRuns {
        LastRuns {
            last: Some(run.clone()),
            last_success: if run.succeeded() {
                Some(run.clone())
            } else {
                self.last_success
            },
        }
    }

    /// The newest of each record among several copies (a quorum's servers).
    pub fn newest(copies: impl IntoIterator<Item = LastRuns>) -> LastRuns {
        copies
            .into_iter()
            .fold(LastRuns::default(), |acc, c| LastRuns {
                last: RunRecord::newer(acc.last, c.last),
                last_success: RunRecord::newer(acc.last_success, c.last_success),
            })
    }

    /// True when no run is on record.
    pub fn is_empty(&self) -> bool {
        self.last.is_none() && self.last_success.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(code: i32, ended: u64) -> RunRecord {
        RunRecord {
            exit_code: code,
            ended_at_ms: ended,
            ..RunRecord::default()
        }
    }

    #[test]
    fn a_failure_keeps_the_last_success() {
        let ok = run(0, 1);
        let bad = run(3, 2);
        let runs = LastRuns::default().with(&ok).with(&bad);
        assert_eq!(runs.last, Some(bad));
        assert_eq!(runs.last_success, Some(ok));
    }

    #[test]
    fn the_newest_copy_wins() {
        let a = LastRuns::default().with(&run(0, 5));
        let b = LastRuns::default().with(&run(0, 1)).with(&run(2, 9));
        let n = LastRuns::newest([a, b, LastRuns::default()]);
        assert_eq!(n.last.map(|r| r.ended_at_ms), Some(9));
        assert_eq!(n.last_success.map(|r| r.ended_at_ms), Some(5));
    }

    #[test]
    fn a_record_without_history_still_reads() {
        let old = br#"{"owner":"o","fencing_token":3,"host":"h","pid":1,"user":"u",
            "command":"c","acquired_at_ms":1,"started_at_ms":1,"ended_at_ms":9,
            "exit_code":0,"waited_ms":0,"ran_ms":8}"#;
        let run = RunRecord::decode(old).expect("an older record");
        assert!(run.recent_ms.is_empty());
        assert!(!run.encode().contains("recent_ms"));
        let next = super::super::estimate::history_after(Some(&run), 5);
        assert_eq!(next, vec![8, 5]);
    }

    #[test]
    fn outcomes_read_plainly() {
        assert_eq!(run(0, 0).outcome(), "ok (exit 0)");
        assert_eq!(run(3, 0).outcome(), "failed (exit 3)");
        let killed = RunRecord {
            signal: Some(9),
            ..run(137, 0)
        };
        assert_eq!(killed.outcome(), "killed by signal 9 (exit 137)");
        let lost = RunRecord {
            lease_lost: true,
            ..run(79, 0)
        };
        assert!(!lost.succeeded());
        assert_eq!(lost.outcome(), "lease lost (exit 79)");
    }
}
