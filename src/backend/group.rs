//! A key held by several holders at once (`--shared`, `--limit N`), kept as one JSON
//! document by stores whose lease is a single record: a SQL row's `holder` column, a
//! Memcached item. The store reads the record under its own row lock or compare-and-swap,
//! changes it with these pure functions, and writes it back.
//!
//! Such a record names the owner [`GROUP_OWNER`], which no caller can be (owner ids are hex
//! digits), and expires with its last member. So an exclusive attempt that reads only the
//! owner and the expiry sees the key held and pays nothing for groups, and a store's
//! exclusive renew or release, which matches on the owner, never touches a group.

use serde::{Deserialize, Serialize};

use super::sharing::{Admission, Sharing};
use super::{Holder, LockInfo};

/// The owner of a record that keeps a [`Group`].
pub const GROUP_OWNER: &str = "*group*";

/// The holders of a key held shared or as a semaphore, in the order they were granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub sharing: Sharing,
    pub members: Vec<Member>,
}

/// One holder of a [`Group`]: a lease of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub owner: String,
    pub token: u64,
    pub depth: u32,
    /// When the lease ends, in milliseconds since the epoch on the store's clock (the
    /// server's where it has one): members compare only with each other and with the
    /// `now_ms` the store passes, read from the same clock.
    pub until_ms: i64,
    pub holder: Holder,
}

/// A waiter's holder, as a store's queue keeps it, with the sharing it asks for (admission
/// needs the sharing of the waiters ahead). Reads an older waiter, written without it, as
/// exclusive.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Queued {
    #[serde(default, skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    #[serde(flatten)]
    pub holder: Holder,
}

impl Queued {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A queued waiter's JSON read back; what does not parse is an exclusive waiter.
    pub fn read(json: &str) -> Queued {
        serde_json::from_str(json).unwrap_or_default()
    }
}

impl Group {
    /// A group whose first member is `first`.
    pub fn new(sharing: Sharing, first: Member) -> Group {
        Group {
            sharing,
            members: vec![first],
        }
    }

    /// The group a record of `owner` keeps in `json`; `None` for an exclusive lease or a
    /// free key.
    pub fn read(owner: Option<&str>, json: Option<&str>) -> Option<Group> {
        if owner != Some(GROUP_OWNER) {
            return None;
        }
        json.and_then(|j| serde_json::from_str(j).ok())
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Drops the members whose lease ended by `now_ms`.
    pub fn prune(&mut self, now_ms: i64) {
        self.members.retain(|m| m.until_ms > now_ms);
    }

    /// The group without the members whose lease ended by `now_ms`; `None` when none is
    /// left.
    pub fn alive(mut self, now_ms: i64) -> Option<Group> {
        self.prune(now_ms);
        (!self.is_empty()).then_some(self)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// When the record must expire: with its last member.
    pub fn until_ms(&self) -> i64 {
        self.members.iter().map(|m| m.until_ms).max().unwrap_or(0)
    }

    /// Whether a caller asking for `me`, with `ahead` queued before it, may join now.
    pub fn admit(&self, me: Sharing, ahead: &[Sharing]) -> Admission {
        me.admit(Some(self.sharing), self.members.len() as u32, ahead)
    }

    pub fn member(&self, owner: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.owner == owner)
    }

    /// Adds a member admitted by [`Group::admit`].
    pub fn join(&mut self, member: Member) {
        self.members.push(member);
    }

    /// One more level for `owner` (re-entry), its lease extended to `until_ms`.
    pub fn reenter(&mut self, owner: &str, until_ms: i64) -> Option<&Member> {
        let m = self.members.iter_mut().find(|m| m.owner == owner)?;
        m.depth += 1;
        m.until_ms = m.until_ms.max(until_ms);
        Some(m)
    }

    /// The place a caller holds already: `owner`'s own grant whose answer was lost (its
    /// lease extended to `until_ms` when that is later), or else a re-entry of the first of
    /// `reenter` that is a member (one level deeper). Its owner, token, and whether it was
    /// a re-entry; `None` when neither is a member.
    pub fn hold_again(
        &mut self,
        owner: &str,
        reenter: &[String],
        until_ms: i64,
    ) -> Option<(String, u64, bool)> {
        if let Some(m) = self.member(owner) {
            let until = m.until_ms.max(until_ms);
            let token = self.renew(owner, until)?.token;
            return Some((owner.to_string(), token, false));
        }
        reenter
            .iter()
            .find_map(|o| Some((o.clone(), self.reenter(o, until_ms)?.token, true)))
    }

    /// Extends `owner`'s lease to `until_ms` (a renewal sets it, shorter or longer).
    pub fn renew(&mut self, owner: &str, until_ms: i64) -> Option<&Member> {
        let m = self.members.iter_mut().find(|m| m.owner == owner)?;
        m.until_ms = until_ms;
        Some(m)
    }

    /// Releases `owner`: one level when `one_level`, else all of them. The depth left
    /// (0: the member left the group); `None` when `owner` is no member.
    pub fn release(&mut self, owner: &str, one_level: bool) -> Option<u32> {
        let at = self.members.iter().position(|m| m.owner == owner)?;
        let m = &mut self.members[at];
        if one_level && m.depth > 1 {
            m.depth -= 1;
            return Some(m.depth);
        }
        self.members.remove(at);
        Some(0)
    }

    /// Every member as `status` shows it, first granted first.
    pub fn infos(&self, key: &str, now_ms: i64) -> Vec<LockInfo> {
        self.members
            .iter()
            .map(|m| LockInfo {
                key: key.to_string(),
                owner: m.owner.clone(),
                fencing_token: m.token,
                holder: m.holder.clone(),
                ttl_left_ms: Some((m.until_ms - now_ms).max(0) as u64),
                depth: m.depth,
            })
            .collect()
    }
}

/// A member one level deep with no holder details, for the stores' unit tests.
#[cfg(test)]
pub(crate) fn member(owner: &str, token: u64, until_ms: i64) -> Member {
    Member {
        owner: owner.into(),
        token,
        depth: 1,
        until_ms,
        holder: Holder::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::Admission::{Admit, Conflict, Wait};
    use super::Sharing::{Exclusive, Limit, Shared};
    use super::*;

    #[test]
    fn a_group_travels_as_json_and_only_under_its_owner() {
        let g = Group::new(Limit(3), member("a", 7, 1_000));
        let json = g.encode();
        assert_eq!(Group::read(Some(GROUP_OWNER), Some(&json)), Some(g));
        assert_eq!(Group::read(Some("0123456789abcdef"), Some(&json)), None);
        assert_eq!(Group::read(None, Some(&json)), None);
        assert_eq!(Group::read(Some(GROUP_OWNER), Some("{}")), None);
    }

    #[test]
    fn members_expire_one_by_one_and_the_record_with_the_last() {
        let mut g = Group::new(Shared, member("a", 1, 100));
        g.join(member("b", 2, 300));
        assert_eq!(g.until_ms(), 300);
        g.prune(100);
        assert_eq!(g.members.len(), 1);
        assert_eq!(g.infos("k", 250)[0].ttl_left_ms, Some(50));
        g.prune(300);
        assert!(g.is_empty());
    }

    #[test]
    fn admission_counts_members_and_the_waiters_ahead() {
        let mut g = Group::new(Limit(2), member("a", 1, 100));
        assert_eq!(g.admit(Limit(2), &[]), Admit);
        assert_eq!(g.admit(Limit(2), &[Limit(2)]), Wait);
        assert_eq!(g.admit(Limit(3), &[]), Conflict(Limit(2)));
        assert_eq!(g.admit(Exclusive, &[]), Conflict(Limit(2)));
        g.join(member("b", 2, 100));
        assert_eq!(g.admit(Limit(2), &[]), Wait);
        let readers = Group::new(Shared, member("r", 3, 100));
        assert_eq!(readers.admit(Shared, &[]), Admit);
        assert_eq!(readers.admit(Shared, &[Exclusive]), Wait);
        assert_eq!(readers.admit(Exclusive, &[]), Wait);
    }

    #[test]
    fn members_reenter_renew_and_release_on_their_own() {
        let mut g = Group::new(Shared, member("a", 1, 100));
        g.join(member("b", 2, 100));
        assert_eq!(
            g.reenter("a", 50).map(|m| (m.depth, m.until_ms)),
            Some((2, 100))
        );
        assert_eq!(g.renew("b", 900).map(|m| m.until_ms), Some(900));
        assert_eq!(g.renew("c", 900), None);
        assert_eq!(g.release("a", true), Some(1));
        assert_eq!(g.release("a", true), Some(0));
        assert_eq!(g.release("a", true), None);
        assert_eq!(g.release("b", false), Some(0));
        assert!(g.is_empty());
    }

    #[test]
    fn a_caller_holds_again_its_lost_grant_or_reenters_a_member() {
        let mut g = Group::new(Shared, member("a", 1, 500));
        g.join(member("b", 2, 500));
        // Its own grant: the lease only ever extended.
        assert_eq!(g.hold_again("a", &[], 300), Some(("a".into(), 1, false)));
        assert_eq!(g.member("a").map(|m| (m.until_ms, m.depth)), Some((500, 1)));
        assert_eq!(g.hold_again("a", &[], 900).map(|h| h.1), Some(1));
        assert_eq!(g.member("a").map(|m| m.until_ms), Some(900));
        // A nested caller re-enters the member it acts for.
        let outer = ["x".to_string(), "b".to_string()];
        assert_eq!(g.hold_again("c", &outer, 700), Some(("b".into(), 2, true)));
        assert_eq!(g.member("b").map(|m| (m.until_ms, m.depth)), Some((700, 2)));
        assert_eq!(g.hold_again("c", &["x".to_string()], 700), None);
    }

    #[test]
    fn a_queued_waiter_keeps_its_sharing_and_older_ones_read_as_exclusive() {
        let q = Queued {
            sharing: Limit(4),
            holder: Holder {
                host: "h".into(),
                ..Holder::default()
            },
        };
        let back = Queued::read(&q.encode());
        assert_eq!((back.sharing, back.holder.host.as_str()), (Limit(4), "h"));
        let plain = serde_json::to_string(&Holder::default()).unwrap();
        assert_eq!(Queued::read(&plain).sharing, Exclusive);
        assert_eq!(Queued::read("not json").sharing, Exclusive);
    }
}
