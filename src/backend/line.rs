//! A line of contenders ordered by creation, the recipe etcd (`concurrency.Mutex`, as
//! `etcdctl lock` writes it) and ZooKeeper (Curator's `InterProcessMutex` and read-write
//! lock) both run, as pure functions: what a contender's entry says, which contenders at
//! the head of the line hold, what a waiter watches, and the status of a line. No I/O here.
//!
//! Each store reads and writes its own entries (etcd keys, ZooKeeper nodes), names them
//! and keeps them alive; through [`Contender`] it supplies only what is its own: the write
//! that stands for a token, its own name for a contender, how it records sharing, and the
//! time left on a lease.
//!
//! The holders are the longest head of the line in which each contender fits beside those
//! before it ([`Sharing::admit`] with no waiter ahead). Any contender that does not fit
//! stops everyone after it: first come, first served, as `admit` has it, and a contender
//! that conflicts with the holders (another `--limit`) blocks the line until its client sees
//! the conflict and leaves. That keeps holding stable: removing contenders from a head of
//! holders leaves a head of holders, and contenders are only added at the end, so one that
//! once held holds until its entry goes. A rule that let a later contender pass a
//! conflicting one could make the conflicting one a holder once the holders before it
//! left, beside the later one. Curator's read-write lock agrees on its own nodes: a writer
//! holds when first, a reader when no writer comes before it.

use serde::{Deserialize, Serialize};

use super::sharing::Admission;
use super::{Holder, KeyStatus, LockInfo, Sharing, WaiterInfo};

/// What dlock stores in a contender's entry, as JSON (`etcdctl lock` stores nothing, a
/// Curator client its IP address: each store reads those its own way). `X` is what one
/// store alone keeps there (ZooKeeper: a detached lease's expiry); its fields sit between
/// `sharing` and the holder's, where they always were.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta<X = ()> {
    pub owner: String,
    pub depth: u32,
    /// The fencing token once the entry was rewritten after it was acquired (re-entered,
    /// renewed); until then it is the entry's last write (see [`Contender::written`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// How this contender holds beside others, where the store keeps it in the entry
    /// (etcd); absent (an older dlock's key, `etcdctl lock`'s) it is an exclusive writer.
    /// A ZooKeeper node's name says it, as Curator's do, so its JSON never carries it.
    #[serde(default, skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    #[serde(flatten)]
    pub own: X,
    #[serde(flatten)]
    pub holder: Holder,
}

impl<X: Serialize> Meta<X> {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// One contender of a line, as a store reads its entry back. The store supplies what is
/// its own; the rest is the same everywhere.
pub trait Contender {
    /// What the store alone keeps in [`Meta`].
    type Own;

    fn meta(&self) -> &Meta<Self::Own>;

    /// The token of an entry that records none: the revision (etcd) or zxid (ZooKeeper) of
    /// its last write, later than any earlier holder's release.
    fn written(&self) -> u64;

    /// True when `owner` is the store's own name for this contender (etcd: its lease in
    /// hex; ZooKeeper: its node name), which a holder written by another client is known by.
    fn named(&self, owner: &str) -> bool;

    /// How it holds the key beside others.
    fn sharing(&self) -> Sharing;

    /// Time left on its lease, when the entry says it without a round trip.
    fn ttl_left_ms(&self) -> Option<u64>;

    fn token(&self) -> u64 {
        self.meta().token.unwrap_or_else(|| self.written())
    }

    /// True when `owner` names this contender: its owner id, or the store's name for it.
    fn owned_by(&self, owner: &str) -> bool {
        self.meta().owner == owner || self.named(owner)
    }

    fn info(&self, key: &str) -> LockInfo {
        let meta = self.meta();
        LockInfo {
            key: key.to_string(),
            owner: meta.owner.clone(),
            fencing_token: self.token(),
            holder: meta.holder.clone(),
            ttl_left_ms: self.ttl_left_ms(),
            depth: meta.depth.max(1),
        }
    }

    fn waiter(&self) -> WaiterInfo {
        let meta = self.meta();
        WaiterInfo {
            id: meta.owner.clone(),
            holder: meta.holder.clone(),
            sharing: self.sharing(),
            priority: 0,
        }
    }
}

/// How each contender of `entries` holds the key, in line order.
pub fn sharings<C: Contender>(entries: &[C]) -> Vec<Sharing> {
    entries.iter().map(C::sharing).collect()
}

/// How many contenders at the head of `line` (their sharings, in line order) hold the key:
/// one exclusive holder, or a run of shared ones, or a semaphore's first N.
pub fn holding(line: &[Sharing]) -> usize {
    let Some(first) = line.first() else {
        return 0;
    };
    let mut held = 0;
    for s in line {
        if s.admit(Some(*first), held as u32, &[]) != Admission::Admit {
            break;
        }
        held += 1;
    }
    held
}

/// The contenders among `entries` (in line order) that hold the key, the first first.
pub fn holders<C: Contender>(entries: &[C]) -> &[C] {
    &entries[..holding(&sharings(entries))]
}

/// What a caller asking for `me` may do with `ahead` contenders before its entry (or
/// before the end of the line, when it has none yet).
pub fn verdict(me: Sharing, ahead: &[Sharing]) -> Admission {
    let held = holding(ahead);
    match me.admit(ahead.first().copied(), held as u32, &[]) {
        Admission::Admit if held < ahead.len() => Admission::Wait,
        other => other,
    }
}

/// What a waiter watches, so that it wakes when it may be admitted, and not for less.
///
/// ZooKeeper decides by it. etcd's exclusive waiter watches its predecessor too (as etcd's
/// `Mutex` does), but its shared and semaphore waiters watch every deletion in the line:
/// an etcd watch starts at the revision the waiter read, so one watch on the lock's prefix
/// misses nothing and costs no more than one on a key, whereas a ZooKeeper watch on the
/// line fires once for any change and must be set again after each.
#[derive(Debug, PartialEq, Eq)]
pub enum Blocker {
    /// The contender at this index in the line: an exclusive waiter's predecessor, or the
    /// nearest contender before a shared waiter that is not shared.
    Node(usize),
    /// Any change to the line: a semaphore waiter is admitted when enough of the holders
    /// leave, whichever they are.
    Line,
}

/// What a waiter asking for `me`, refused behind `ahead`, watches (`ahead` is not empty).
pub fn blocker(me: Sharing, ahead: &[Sharing]) -> Blocker {
    let last = ahead.len().saturating_sub(1);
    match me {
        Sharing::Exclusive => Blocker::Node(last),
        Sharing::Shared => {
            let nearest = ahead.iter().rposition(|s| *s != Sharing::Shared);
            Blocker::Node(nearest.unwrap_or(last))
        }
        Sharing::Limit(_) => Blocker::Line,
    }
}

/// The status of lock `key` whose contenders are `entries`, in line order: its holders
/// (each with `ttl_left`, the time left on its lease as the store knows it) and, after
/// them, its waiters.
pub fn status<C: Contender>(
    key: &str,
    entries: &[C],
    mut ttl_left: impl FnMut(&C) -> Option<u64>,
) -> KeyStatus {
    let held = holders(entries);
    let sharing = held.first().map_or(Sharing::Exclusive, C::sharing);
    let infos = held
        .iter()
        .map(|h| LockInfo {
            ttl_left_ms: ttl_left(h),
            ..h.info(key)
        })
        .collect();
    let waiters = entries[held.len()..].iter().map(C::waiter).collect();
    KeyStatus::group(key, sharing, infos).with_waiters(waiters)
}

#[cfg(test)]
mod tests {
    use super::Admission::{Admit, Conflict, Wait};
    use super::Sharing::{Exclusive, Limit, Shared};
    use super::*;

    /// A contender as a store would read it: its metadata, its last write, its own name.
    struct Entry {
        meta: Meta,
        written: u64,
        name: &'static str,
    }

    impl Contender for Entry {
        type Own = ();
        fn meta(&self) -> &Meta {
            &self.meta
        }
        fn written(&self) -> u64 {
            self.written
        }
        fn named(&self, owner: &str) -> bool {
            self.name == owner
        }
        fn sharing(&self) -> Sharing {
            self.meta.sharing
        }
        fn ttl_left_ms(&self) -> Option<u64> {
            None
        }
    }

    fn entry(owner: &str, sharing: Sharing, written: u64) -> Entry {
        Entry {
            meta: Meta {
                owner: owner.into(),
                depth: 1,
                sharing,
                ..Meta::default()
            },
            written,
            name: "1f",
        }
    }

    #[test]
    fn the_head_that_fits_holds() {
        assert_eq!(holding(&[]), 0);
        assert_eq!(holding(&[Exclusive, Exclusive]), 1);
        assert_eq!(holding(&[Exclusive, Shared, Shared]), 1);
        assert_eq!(holding(&[Shared, Shared, Shared]), 3);
        // A queued writer stops the readers behind it.
        assert_eq!(holding(&[Shared, Shared, Exclusive, Shared]), 2);
        assert_eq!(holding(&[Limit(2), Limit(2), Limit(2)]), 2);
        assert_eq!(holding(&[Limit(3), Limit(3)]), 2);
    }

    #[test]
    fn a_contender_that_does_not_fit_stops_the_line() {
        // Racing callers that disagree on N: the first holds, nobody behind the other.
        assert_eq!(holding(&[Limit(2), Limit(3), Limit(2)]), 1);
        // An `etcdctl lock` key or a Curator node reads as an exclusive writer.
        assert_eq!(holding(&[Exclusive, Limit(2)]), 1);
        assert_eq!(holding(&[Limit(2), Exclusive, Limit(2)]), 1);
        assert_eq!(holding(&[Shared, Limit(2)]), 1);
    }

    #[test]
    fn a_removal_only_lets_more_in() {
        let line = [Limit(2), Limit(2), Limit(2), Limit(2)];
        assert_eq!(holding(&line), 2);
        assert_eq!(holding(&line[1..]), 2);
        let rw = [Shared, Exclusive, Shared, Shared];
        assert_eq!(holding(&rw), 1);
        assert_eq!(holding(&rw[1..]), 1);
        assert_eq!(holding(&rw[2..]), 2);
    }

    #[test]
    fn a_caller_fits_beside_the_holders_and_behind_the_waiters() {
        assert_eq!(verdict(Exclusive, &[]), Admit);
        assert_eq!(verdict(Shared, &[Shared, Shared]), Admit);
        assert_eq!(verdict(Shared, &[Shared, Exclusive]), Wait);
        assert_eq!(verdict(Exclusive, &[Shared]), Wait);
        assert_eq!(verdict(Limit(2), &[Limit(2)]), Admit);
        assert_eq!(verdict(Limit(2), &[Limit(2), Limit(2)]), Wait);
        assert_eq!(verdict(Limit(2), &[Limit(2), Exclusive]), Wait);
    }

    #[test]
    fn a_caller_that_does_not_fit_the_holders_conflicts() {
        assert_eq!(verdict(Limit(3), &[Limit(2)]), Conflict(Limit(2)));
        assert_eq!(
            verdict(Exclusive, &[Limit(2), Limit(2)]),
            Conflict(Limit(2))
        );
        assert_eq!(verdict(Shared, &[Limit(2)]), Conflict(Limit(2)));
        assert_eq!(verdict(Limit(2), &[Exclusive]), Conflict(Exclusive));
        assert_eq!(verdict(Limit(2), &[Shared, Exclusive]), Conflict(Shared));
    }

    #[test]
    fn waiters_watch_what_can_admit_them() {
        assert_eq!(blocker(Exclusive, &[Shared, Shared]), Blocker::Node(1));
        assert_eq!(
            blocker(Shared, &[Exclusive, Shared, Shared]),
            Blocker::Node(0)
        );
        assert_eq!(
            blocker(Shared, &[Shared, Exclusive, Shared]),
            Blocker::Node(1)
        );
        assert_eq!(blocker(Limit(2), &[Limit(2), Limit(2)]), Blocker::Line);
    }

    /// The JSON dlock has always written: what older dlocks, and the interop tests, read.
    #[test]
    fn the_json_keeps_its_shape() {
        #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
        struct Own {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            expires_at_ms: Option<u64>,
        }
        let holder = Holder {
            host: "h".into(),
            pid: 7,
            user: "u".into(),
            command: "c".into(),
            acquired_at_ms: 5,
            ..Holder::default()
        };
        let plain: Meta = Meta {
            owner: "o".into(),
            depth: 1,
            holder: holder.clone(),
            ..Meta::default()
        };
        let fields = r#""host":"h","pid":7,"user":"u","command":"c","acquired_at_ms":5}"#;
        let json = String::from_utf8(plain.encode()).unwrap();
        assert_eq!(json, format!(r#"{{"owner":"o","depth":1,{fields}"#));
        let shared = Meta {
            token: Some(9),
            sharing: Limit(3),
            ..plain.clone()
        };
        let json = String::from_utf8(shared.encode()).unwrap();
        let head = r#"{"owner":"o","depth":1,"token":9,"sharing":{"limit":3},"#;
        assert_eq!(json, format!("{head}{fields}"));
        let back: Meta = serde_json::from_str(&json).unwrap();
        assert_eq!((back.token, back.sharing), (Some(9), Limit(3)));
        assert_eq!(back.holder, holder);
        let detached = Meta {
            own: Own {
                expires_at_ms: Some(42),
            },
            owner: "o".into(),
            depth: 2,
            token: None,
            sharing: Exclusive,
            holder: holder.clone(),
        };
        let json = String::from_utf8(detached.encode()).unwrap();
        let head = r#"{"owner":"o","depth":2,"expires_at_ms":42,"#;
        assert_eq!(json, format!("{head}{fields}"));
        let back: Meta<Own> = serde_json::from_str(&json).unwrap();
        assert_eq!(back.own.expires_at_ms, Some(42));
        assert_eq!(back.holder, holder);
    }

    #[test]
    fn a_contender_is_known_by_its_owner_or_its_name_and_its_token_by_its_last_write() {
        let mut e = entry("o", Exclusive, 7);
        assert!(e.owned_by("o") && e.owned_by("1f") && !e.owned_by("x"));
        assert_eq!(e.token(), 7);
        e.meta.token = Some(3);
        e.meta.depth = 0;
        let info = e.info("k");
        assert_eq!((info.fencing_token, info.depth), (3, 1));
        assert_eq!(e.waiter().id, "o");
    }

    #[test]
    fn a_line_states_its_holders_then_its_waiters() {
        let line = [
            entry("a", Shared, 1),
            entry("b", Shared, 2),
            entry("c", Exclusive, 3),
            entry("d", Shared, 4),
        ];
        let st = status("k", &line, |e| Some(e.written * 1000));
        assert_eq!(st.sharing, Shared);
        let holders: Vec<_> = st.holders.iter().map(|h| h.owner.as_str()).collect();
        assert_eq!(holders, ["a", "b"]);
        assert_eq!(st.holders[1].ttl_left_ms, Some(2000));
        let waiters: Vec<_> = st.waiters.unwrap().into_iter().map(|w| w.id).collect();
        assert_eq!(waiters, ["c", "d"]);
        let one = status("k", &line[2..], |_| None);
        assert_eq!(one.lock.map(|l| l.owner), Some("c".into()));
        assert!(one.holders.is_empty());
        let free = status::<Entry>("k", &[], |_| None);
        assert_eq!(free, KeyStatus::free("k").with_waiters(Vec::new()));
    }
}
