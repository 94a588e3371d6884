//! The steps of a group's transaction (`--shared`, `--limit N`: see
//! [`crate::backend::group`]) written once: an attempt ([`GroupAttempt`]) and a member's
//! renewal, hold or release ([`MemberChange`]) as provided methods, each store supplying
//! its statements and its row as required ones.

use std::time::Duration;

use super::lease::{ms, Outcome};
use crate::backend::group::{Group, Member};
use crate::backend::sharing::{Admission, Sharing};
use crate::backend::{now_ms, AcquireRequest, Holder, Released};

/// A key's row as a group transaction reads it, the row locked: what the skeleton in
/// [`GroupAttempt`] and [`MemberChange`] decides on. The store keeps the rest of its row.
pub struct GroupRow {
    /// The row's counter: the last token granted.
    pub token: i64,
    /// The server's now, ms since the epoch: the members' clock.
    pub now_ms: i64,
    /// The live members, when the row keeps a group.
    pub group: Option<Group>,
    /// Whether a live exclusive lease holds the key.
    pub exclusive: bool,
}

/// What a group attempt decided (the store commits it).
// One per attempt, matched at once: boxing the granted outcome would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Decision<R> {
    Granted(Outcome),
    /// Refused: what the store says about it (what blocks the caller, its place in line).
    Refused(R),
    /// Held in a way the caller must not join nor wait for (exit 2).
    Conflict(Sharing),
}

/// A shared or semaphore attempt (or an exclusive one on a key a group holds), the steps
/// written once: a member claims its lost grant again or re-enters, else the caller is
/// admitted as a new member (or the exclusive holder), made to wait, or refused for good.
/// Each store supplies its statements: the queue, the writes, the refusal.
pub(crate) trait GroupAttempt {
    type Error;
    /// What a refusal comes to in the store.
    type Refusal;

    /// The sharing of the live waiters queued before the caller (none when not fair).
    async fn ahead(&mut self, req: &AcquireRequest) -> Result<Vec<Sharing>, Self::Error>;
    /// Writes the group with the caller a member and out of the line (`again`: a claim or
    /// re-entry, nobody told); the token the row keeps.
    async fn put_member(
        &mut self,
        req: &AcquireRequest,
        token: i64,
        group: &Group,
        again: bool,
    ) -> Result<i64, Self::Error>;
    /// Grants the free key to an exclusive caller, as an exclusive attempt does.
    async fn grant_exclusive(
        &mut self,
        req: &AcquireRequest,
        row: &GroupRow,
    ) -> Result<Outcome, Self::Error>;
    /// The caller waits: in line when asked, told what blocks it.
    async fn refuse(
        &mut self,
        req: &AcquireRequest,
        row: &GroupRow,
    ) -> Result<Self::Refusal, Self::Error>;
    /// The caller is never to be admitted: out of the line at once.
    async fn leave_line(&mut self, req: &AcquireRequest) -> Result<(), Self::Error>;
    /// Whether the row has room for `group` (a column of bounded size).
    fn room(&self, _group: &Group) -> bool {
        true
    }

    /// One attempt on the key's locked `row`.
    async fn attempt(
        &mut self,
        req: &AcquireRequest,
        row: GroupRow,
    ) -> Result<Decision<Self::Refusal>, Self::Error> {
        let until = row.now_ms + ms(req.ttl);
        if let Some(mut g) = row.group.clone() {
            if let Some((owner, token, reentered)) = g.hold_again(&req.owner, &req.reenter, until) {
                self.put_member(req, row.token, &g, true).await?;
                let token = token as i64;
                let granted = Outcome::Granted {
                    owner,
                    token,
                    reentered,
                };
                return Ok(Decision::Granted(granted));
            }
        }
        let ahead = self.ahead(req).await?;
        let (held, holders) = match &row.group {
            Some(g) => (Some(g.sharing), g.members.len() as u32),
            None if row.exclusive => (Some(Sharing::Exclusive), 1),
            None => (None, 0),
        };
        match req.sharing.admit(held, holders, &ahead) {
            Admission::Admit if req.sharing.is_exclusive() => {
                Ok(Decision::Granted(self.grant_exclusive(req, &row).await?))
            }
            Admission::Admit => {
                let group = joined(req, &row, until);
                if !self.room(&group) {
                    // No room for one more member: wait for one to leave.
                    return Ok(Decision::Refused(self.refuse(req, &row).await?));
                }
                let token = self.put_member(req, row.token + 1, &group, false).await?;
                let owner = req.owner.clone();
                let granted = Outcome::Granted {
                    owner,
                    token,
                    reentered: false,
                };
                Ok(Decision::Granted(granted))
            }
            Admission::Wait => Ok(Decision::Refused(self.refuse(req, &row).await?)),
            Admission::Conflict(held) => {
                self.leave_line(req).await?;
                Ok(Decision::Conflict(held))
            }
        }
    }
}

/// `row`'s group with the caller a new member holding the row's next token until
/// `until_ms` (a new group when the key was free).
fn joined(req: &AcquireRequest, row: &GroupRow, until_ms: i64) -> Group {
    let member = Member {
        owner: req.owner.clone(),
        token: (row.token + 1) as u64,
        depth: 1,
        until_ms,
        holder: Holder {
            acquired_at_ms: now_ms(),
            ..req.holder.clone()
        },
    };
    match row.group.clone() {
        Some(mut g) => {
            g.join(member);
            g
        }
        None => Group::new(req.sharing, member),
    }
}

/// What a member's renewal, hold or release does to its group.
pub enum Change {
    /// The lease extended to this from now (never shortened).
    Renew(Duration),
    /// The lease left to end this from now, marked as held until the wall-clock ms.
    Linger(Duration, u64),
    /// One level (true) or all of them.
    Release(bool),
}

/// What a change did.
pub enum Changed {
    /// The member's token and the ms left of its lease (renew, linger).
    Lease(i64, i64),
    Released(Released),
    /// The key is held by a group the owner is no member of (any more): its place is gone.
    Gone,
}

impl Change {
    /// `self` done to `owner`'s membership of `g` at `now_ms`; `Gone` when it is no member.
    pub fn apply(self, g: &mut Group, owner: &str, now_ms: i64) -> Changed {
        let Some(m) = g.member(owner).cloned() else {
            return Changed::Gone;
        };
        match self {
            Change::Renew(ttl) => {
                let until = m.until_ms.max(now_ms + ms(ttl));
                g.renew(owner, until);
                Changed::Lease(m.token as i64, until - now_ms)
            }
            Change::Linger(left, held_until) => {
                let until = now_ms + ms(left);
                if let Some(m) = g.members.iter_mut().find(|m| m.owner == owner) {
                    m.until_ms = until;
                    m.holder.held_until_ms = Some(held_until);
                }
                Changed::Lease(m.token as i64, until - now_ms)
            }
            Change::Release(one) => {
                let depth = g.release(owner, one).unwrap_or(0);
                Changed::Released(Released {
                    previous_owner: Some(owner.to_string()),
                    still_held: depth > 0,
                })
            }
        }
    }
}

/// A member's renewal, hold or release, the steps written once: the change applied to the
/// live group of the key's locked row and written back. The store supplies the write.
pub(crate) trait MemberChange {
    type Error;

    /// Writes `group` to the key's row, its counter at `token`; `None` frees the row.
    /// `freed`: a member left, and waiters may look again.
    async fn put(
        &mut self,
        key: &str,
        token: i64,
        group: Option<&Group>,
        freed: bool,
    ) -> Result<(), Self::Error>;

    /// Changes `owner`'s membership of the group `row` keeps (the row locked); `None` when
    /// the key has no row or keeps no group, and nothing is written unless it changed.
    async fn change(
        &mut self,
        key: &str,
        row: Option<GroupRow>,
        owner: &str,
        change: Change,
    ) -> Result<Option<Changed>, Self::Error> {
        let Some((mut g, row)) = row.and_then(|r| Some((r.group.clone()?, r))) else {
            return Ok(None);
        };
        let changed = change.apply(&mut g, owner, row.now_ms);
        let freed = match &changed {
            Changed::Gone => return Ok(Some(changed)),
            Changed::Lease(..) => false,
            Changed::Released(r) => !r.still_held,
        };
        let group = (!g.is_empty()).then_some(&g);
        self.put(key, row.token, group, freed).await?;
        Ok(Some(changed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::group::member;
    use crate::backend::Sharing::{Exclusive, Limit, Shared};

    /// A store that keeps the row's writes and says what it was asked.
    #[derive(Default)]
    struct Fake {
        ahead: Vec<Sharing>,
        written: Vec<(i64, Option<Group>, &'static str)>,
    }

    impl GroupAttempt for Fake {
        type Error = ();
        type Refusal = ();

        async fn ahead(&mut self, _: &AcquireRequest) -> Result<Vec<Sharing>, ()> {
            Ok(self.ahead.clone())
        }
        async fn put_member(
            &mut self,
            _: &AcquireRequest,
            token: i64,
            group: &Group,
            again: bool,
        ) -> Result<i64, ()> {
            let what = if again { "again" } else { "joined" };
            self.written.push((token, Some(group.clone()), what));
            Ok(token)
        }
        async fn grant_exclusive(
            &mut self,
            req: &AcquireRequest,
            row: &GroupRow,
        ) -> Result<Outcome, ()> {
            self.written.push((row.token + 1, None, "exclusive"));
            let owner = req.owner.clone();
            Ok(Outcome::Granted {
                owner,
                token: row.token + 1,
                reentered: false,
            })
        }
        async fn refuse(&mut self, _: &AcquireRequest, _: &GroupRow) -> Result<(), ()> {
            Ok(())
        }
        async fn leave_line(&mut self, _: &AcquireRequest) -> Result<(), ()> {
            self.written.push((0, None, "left"));
            Ok(())
        }
    }

    impl MemberChange for Fake {
        type Error = ();

        async fn put(
            &mut self,
            _: &str,
            token: i64,
            group: Option<&Group>,
            freed: bool,
        ) -> Result<(), ()> {
            let what = if freed { "freed" } else { "kept" };
            self.written.push((token, group.cloned(), what));
            Ok(())
        }
    }

    fn request(owner: &str, sharing: Sharing) -> AcquireRequest {
        AcquireRequest {
            key: "k".into(),
            owner: owner.into(),
            reenter: vec!["b".into()],
            ttl: Duration::from_millis(500),
            holder: Holder::default(),
            detached: false,
            fair: true,
            sharing,
            queue: Default::default(),
        }
    }

    fn row(group: Option<Group>) -> GroupRow {
        GroupRow {
            token: 7,
            now_ms: 1_000,
            group,
            exclusive: false,
        }
    }

    fn granted(d: Decision<()>) -> Option<(String, i64, bool)> {
        match d {
            Decision::Granted(Outcome::Granted {
                owner,
                token,
                reentered,
            }) => Some((owner, token, reentered)),
            _ => None,
        }
    }

    #[tokio::test]
    async fn an_attempt_claims_again_joins_with_the_next_token_or_stays_out() {
        let readers = Group::new(Shared, member("a", 5, 2_000));
        let mut f = Fake::default();
        let d = f
            .attempt(&request("a", Shared), row(Some(readers.clone())))
            .await;
        assert_eq!(granted(d.unwrap()), Some(("a".into(), 5, false)));
        assert_eq!((f.written[0].0, f.written[0].2), (7, "again"));
        let d = f
            .attempt(&request("c", Shared), row(Some(readers.clone())))
            .await;
        assert_eq!(granted(d.unwrap()), Some(("c".into(), 8, false)));
        let joined = f.written[1].1.as_ref().map(|g| g.members.len());
        assert_eq!((f.written[1].2, joined), ("joined", Some(2)));
        f.ahead = vec![Exclusive];
        let d = f
            .attempt(&request("c", Shared), row(Some(readers.clone())))
            .await;
        assert!(
            matches!(d, Ok(Decision::Refused(()))),
            "a writer queued ahead"
        );
        let d = f.attempt(&request("c", Limit(2)), row(Some(readers))).await;
        assert!(matches!(d, Ok(Decision::Conflict(Shared))));
        assert_eq!(f.written.last().map(|w| w.2), Some("left"));
        f.ahead.clear();
        let d = f.attempt(&request("x", Exclusive), row(None)).await;
        assert_eq!(granted(d.unwrap()), Some(("x".into(), 8, false)));
    }

    #[tokio::test]
    async fn a_change_renews_never_shorter_and_the_last_release_frees_the_row() {
        let g = Group::new(Limit(2), member("a", 5, 2_000));
        let mut f = Fake::default();
        let renewed = f
            .change(
                "k",
                Some(row(Some(g.clone()))),
                "a",
                Change::Renew(Duration::ZERO),
            )
            .await;
        assert!(matches!(renewed, Ok(Some(Changed::Lease(5, 1_000)))));
        let gone = f
            .change("k", Some(row(Some(g.clone()))), "z", Change::Release(false))
            .await;
        assert!(matches!(gone, Ok(Some(Changed::Gone))));
        assert!(matches!(
            f.change("k", Some(row(None)), "a", Change::Release(false))
                .await,
            Ok(None)
        ));
        let out = f
            .change("k", Some(row(Some(g))), "a", Change::Release(false))
            .await;
        assert!(matches!(out, Ok(Some(Changed::Released(r))) if !r.still_held));
        let w: Vec<_> = f
            .written
            .iter()
            .map(|w| (w.0, w.1.is_some(), w.2))
            .collect();
        assert_eq!(w, vec![(7, true, "kept"), (7, false, "freed")]);
    }
}
