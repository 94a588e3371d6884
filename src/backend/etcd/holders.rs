//! Shared locks and semaphores on etcd, as pure functions: who of a lock's contenders holds,
//! and the transactions of a shared or semaphore contender. No I/O here.
//!
//! Every contender keeps its key `<prefix>NAME/<lease hex>`, and says in its value how it
//! holds ([`Meta::sharing`](super::recipe::Meta)); the holders are the oldest contenders
//! that [`Sharing::admit`] lets in, each counting those before it as holders already (first
//! come, first served). They are always a run at the head of the line: a contender is
//! admitted only if every one before it is, so a deletion can only let more in, and a new
//! key, the last, changes nothing for those before it.

use super::proto::*;
use super::recipe::{contenders, Entry};
use crate::backend::sharing::Admission;
use crate::backend::Sharing;

/// How many of the contenders, oldest first, hold now: the run at the head of the line in
/// which each fits beside all the ones before it. A contender that cannot ever share with
/// one before it (a semaphore of another N, a semaphore beside an exclusive lock) ends the
/// run: it is about to be refused and leave, and nobody behind it holds meanwhile.
pub fn holding(sharings: &[Sharing]) -> usize {
    sharings
        .iter()
        .enumerate()
        .take_while(|(k, me)| {
            let ahead = &sharings[..*k];
            ahead.iter().all(|a| me.compatible(*a)) && me.admit(None, 0, ahead) == Admission::Admit
        })
        .count()
}

/// The holders among `entries` (oldest first): see [`holding`].
pub fn holders(entries: &[Entry]) -> &[Entry] {
    let sharings: Vec<Sharing> = entries.iter().map(|e| e.meta.sharing).collect();
    &entries[..holding(&sharings)]
}

fn op(request: Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// Reads the key `runs` (its lease), without its value.
fn run_lease_range(runs: &[u8]) -> RequestOp {
    op(Request::Range(RangeRequest {
        key: runs.to_vec(),
        keys_only: true,
        ..Default::default()
    }))
}

/// A shared or semaphore contender's attempt, in one round trip: creates our key on `lease`
/// if absent, then reads every contender (oldest first) and the lease of the run records.
/// Answers: [put, contenders, runs] when created, else [contenders, runs].
pub fn enter_shared(dir: &[u8], key: &[u8], value: Vec<u8>, lease: i64, runs: &[u8]) -> TxnRequest {
    let (absent, put) = super::recipe::create_if_absent(key, value, lease);
    let all = || op(Request::Range(contenders(dir, 0)));
    TxnRequest {
        compare: vec![absent],
        success: vec![op(Request::Put(put)), all(), run_lease_range(runs)],
        failure: vec![all(), run_lease_range(runs)],
    }
}

/// Marks the admission of a contender that waited: rewrites its key (created at `created`)
/// with `value` if it is still there, so that the key's mod revision, the revision of this
/// very write, is its own fencing token, later than any token handed out before, even to a
/// contender admitted by the same release.
pub fn stamp(key: &[u8], created: i64, value: Vec<u8>) -> TxnRequest {
    super::recipe::put_if(super::recipe::created_at(key, created), value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Sharing::{Exclusive, Limit, Shared};

    #[test]
    fn readers_hold_together_until_a_writer_in_line() {
        assert_eq!(holding(&[]), 0);
        assert_eq!(holding(&[Shared, Shared, Shared]), 3);
        // A queued writer stops the readers behind it.
        assert_eq!(holding(&[Shared, Shared, Exclusive, Shared]), 2);
        assert_eq!(holding(&[Exclusive, Shared, Shared]), 1);
        assert_eq!(holding(&[Exclusive, Exclusive]), 1);
    }

    #[test]
    fn a_semaphore_holds_its_first_n() {
        assert_eq!(holding(&[Limit(2), Limit(2), Limit(2)]), 2);
        assert_eq!(holding(&[Limit(3), Limit(3)]), 2);
    }

    #[test]
    fn a_contender_that_disagrees_ends_the_run() {
        // Racing callers that disagree on N: the first holds, nobody behind the other.
        assert_eq!(holding(&[Limit(2), Limit(3), Limit(2)]), 1);
        // An `etcdctl lock` key reads as an exclusive writer.
        assert_eq!(holding(&[Exclusive, Limit(2)]), 1);
        assert_eq!(holding(&[Limit(2), Exclusive, Limit(2)]), 1);
        assert_eq!(holding(&[Shared, Limit(2)]), 1);
    }

    #[test]
    fn a_deletion_only_lets_more_in() {
        let line = [Limit(2), Limit(2), Limit(2), Limit(2)];
        assert_eq!(holding(&line), 2);
        assert_eq!(holding(&line[1..]), 2);
        let rw = [Shared, Exclusive, Shared, Shared];
        assert_eq!(holding(&rw), 1);
        assert_eq!(holding(&rw[1..]), 1);
        assert_eq!(holding(&rw[2..]), 2);
    }
}
