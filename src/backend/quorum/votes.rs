//! Counting a quorum's votes: pure functions over the servers' answers, with no I/O.
//!
//! A lock held on a majority of independent servers decides everything by counting: an
//! acquire round is won when a majority granted (or re-entered for one enclosing holder),
//! with validity left after the time taken and the clock drift; what did not make the
//! majority is given back; a renewal or release is done, refused or unavailable by the
//! count of each answer. The store (Redlock today) sends the requests and hands the answers
//! here, so that every quorum decides alike and the rules are tested without a server.

use std::collections::HashMap;
use std::time::Duration;

use crate::backend::store::Busy;
use crate::backend::{Lease, LockInfo, Sharing};
use crate::lease::drift;

/// The quorum of `n` servers: a strict majority (2 of 3, 3 of 4, 3 of 5).
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// How many of `n` servers must admit a caller asking for `sharing` for the grant to be
/// safe: each holder holds on a set of servers, and the quorum must make sure that more
/// holders than the mode allows can never each gather one.
///
/// * Exclusive and `--shared`: a majority. Two majorities always share a server, and a
///   server never admits a writer beside anyone, so a writer's majority and any other
///   holder's majority meet on a server that refused one of them. Readers never conflict
///   with one another, so nothing more is needed between them.
/// * `--limit N`: a majority is not enough. With 3 servers and N = 2, holders A on {1,2},
///   B on {2,3} and C on {1,3} are three holders while each server counts only two. By
///   pigeonhole, N+1 holders each on q servers make (N+1)·q memberships on n servers,
///   which forces some server to count N+1 (and refuse one of them) as soon as
///   (N+1)·q > N·n, that is q > n·N/(N+1). So q = ⌊n·N/(N+1)⌋ + 1: always at least a
///   majority, and all 3 servers for n = 3, N = 2. A semaphore therefore needs that many
///   servers up.
pub fn quorum_for(n: usize, sharing: Sharing) -> usize {
    match sharing {
        Sharing::Exclusive | Sharing::Shared => quorum(n),
        Sharing::Limit(limit) => {
            let limit = limit as usize;
            (n * limit / (limit + 1) + 1).max(quorum(n))
        }
    }
}

/// One server's answer to an acquire request; `E` is the store's error.
pub enum Answer<E> {
    /// Granted: afresh, or a re-entry (`Lease::reentered`) for an enclosing holder.
    Granted(Lease),
    /// Refused: someone else holds the key there.
    Busy(Busy),
    /// Not connected, connection refused or reset, or an error reply.
    Down(E),
    /// No answer in time: busy or frozen, and it may have granted all the same.
    Slow(E),
}

/// The answers of one acquire round, counted. Servers are named by their index.
pub struct Tally<E> {
    /// Fresh grants to the caller.
    pub fresh: Vec<(usize, Lease)>,
    /// Re-entries for one of the caller's enclosing holders.
    pub reentered: Vec<(usize, Lease)>,
    /// Servers that refused.
    pub refused: Vec<usize>,
    /// Servers that failed: they may have granted.
    pub unknown: Vec<usize>,
    /// The owner seen on most of the refusing servers, its lock, and on how many servers.
    pub holder: Option<(LockInfo, usize)>,
    /// When the lease seen may expire (smallest TTL reported).
    pub retry: Option<Duration>,
    /// The highest fencing token seen, or the floor the round was sent with.
    pub max_token: u64,
    /// Servers that answered.
    pub answered: usize,
    /// Why servers failed, one error each.
    pub failed: Vec<E>,
    /// How many of the failures are servers down (the others did not answer in time).
    pub down: usize,
}

/// Counts one round's answers, in server order; `floor` is the highest token the round
/// was sent with.
pub fn tally<E>(answers: impl IntoIterator<Item = Answer<E>>, floor: u64) -> Tally<E> {
    let mut t = Tally {
        fresh: Vec::new(),
        reentered: Vec::new(),
        refused: Vec::new(),
        unknown: Vec::new(),
        holder: None,
        retry: None,
        max_token: floor,
        answered: 0,
        failed: Vec::new(),
        down: 0,
    };
    let mut holders: HashMap<String, (LockInfo, usize)> = HashMap::new();
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Answer::Granted(lease) => {
                t.answered += 1;
                t.max_token = t.max_token.max(lease.fencing_token);
                if lease.reentered {
                    t.reentered.push((i, lease));
                } else {
                    t.fresh.push((i, lease));
                }
            }
            Answer::Busy(busy) => {
                t.answered += 1;
                t.refused.push(i);
                if let Some(retry) = busy.retry {
                    t.retry = Some(t.retry.map_or(retry, |r| r.min(retry)));
                }
                if let Some(lock) = busy.holder {
                    t.max_token = t.max_token.max(lock.fencing_token);
                    holders
                        .entry(lock.owner.clone())
                        .and_modify(|(_, n)| *n += 1)
                        .or_insert((lock, 1));
                }
            }
            Answer::Down(e) => {
                t.down += 1;
                t.unknown.push(i);
                t.failed.push(e);
            }
            Answer::Slow(e) => {
                t.unknown.push(i);
                t.failed.push(e);
            }
        }
    }
    t.holder = holders.into_values().max_by_key(|(_, n)| *n);
    t
}

impl<E> Tally<E> {
    /// The servers that answered without granting the caller afresh: refused, or
    /// re-entered for another owner. Their fencing counters are raised too.
    pub fn others(&self) -> Vec<usize> {
        let reentered = self.reentered.iter().map(|(i, _)| *i);
        self.refused.iter().copied().chain(reentered).collect()
    }
}

/// What a round's answers decide.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// A majority re-entered for `owner`: the enclosing lease, one level deeper, with the
    /// largest of their tokens.
    Reentered { owner: String, token: u64 },
    /// A majority granted afresh; `token` is the largest of their tokens.
    Granted { token: u64 },
    /// No majority either way.
    Lost,
}

impl Decision {
    /// Who a won round was won for (`caller` when granted afresh), with the token, and
    /// whether it was a re-entry; `None` when it was lost.
    pub fn winner(&self, caller: &str) -> Option<(String, u64, bool)> {
        match self {
            Decision::Reentered { owner, token } => Some((owner.clone(), *token, true)),
            Decision::Granted { token } => Some((caller.to_string(), *token, false)),
            Decision::Lost => None,
        }
    }
}

/// Decides a round: a majority re-entered for one owner, or a majority granted afresh.
pub fn decide<E>(tally: &Tally<E>, quorum: usize) -> Decision {
    let mut by_owner: HashMap<&str, Vec<&Lease>> = HashMap::new();
    for (_, lease) in &tally.reentered {
        by_owner.entry(&lease.owner).or_default().push(lease);
    }
    let reentry = by_owner.into_values().find(|leases| leases.len() >= quorum);
    if let Some(leases) = reentry {
        let token = leases.iter().map(|l| l.fencing_token).max().unwrap_or(0);
        return Decision::Reentered {
            owner: leases[0].owner.clone(),
            token,
        };
    }
    if tally.fresh.len() >= quorum {
        let token = tally
            .fresh
            .iter()
            .map(|(_, l)| l.fencing_token)
            .max()
            .unwrap_or(0);
        return Decision::Granted { token };
    }
    Decision::Lost
}

/// How the fresh grants stand against `token`, the largest of them: how many granted
/// with it, and which servers granted with less (their counters must be raised).
pub fn behind(fresh: &[(usize, Lease)], token: u64) -> (usize, Vec<usize>) {
    let agreeing = fresh
        .iter()
        .filter(|(_, l)| l.fencing_token == token)
        .count();
    let behind = fresh
        .iter()
        .filter(|(_, l)| l.fencing_token < token)
        .map(|(i, _)| *i)
        .collect();
    (agreeing, behind)
}

/// What is left of a lease of `ttl` granted by requests sent `elapsed` ago, once the
/// clock drift is allowed for; `None` when nothing is (the grant must not be used).
pub fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed + drift(ttl))
        .filter(|v| !v.is_zero())
}

/// What to take back after a round: fresh grants (with the servers that may have
/// granted without answering), and one level of each re-entry, with its owner.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GiveBack {
    pub fresh: Vec<usize>,
    pub nested: Vec<(usize, String)>,
}

/// Settles a round: the grants beside the majority when it was won (`won`, as decided),
/// every grant and every server that may have granted when it was lost (`won == None`).
pub fn settle<E>(tally: &Tally<E>, won: Option<&Decision>) -> GiveBack {
    let fresh = || tally.fresh.iter().map(|(i, _)| *i);
    let nested = || {
        tally
            .reentered
            .iter()
            .map(|(i, l)| (*i, l.owner.clone()))
            .collect()
    };
    match won {
        Some(Decision::Reentered { .. }) => GiveBack {
            fresh: fresh().collect(),
            nested: Vec::new(),
        },
        Some(Decision::Granted { .. }) => GiveBack {
            fresh: Vec::new(),
            nested: nested(),
        },
        Some(Decision::Lost) | None => GiveBack {
            fresh: fresh().chain(tally.unknown.iter().copied()).collect(),
            nested: nested(),
        },
    }
}

/// How a request sent to every server (renew, release) ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A majority did it.
    Done,
    /// A majority definitely said the caller is not the owner.
    Refused,
    /// Neither: too few servers answered.
    Unavailable,
}

/// The verdict of `done` servers that did it and `refused` that said the caller is not
/// the owner.
pub fn verdict(done: usize, refused: usize, quorum: usize) -> Verdict {
    if done >= quorum {
        Verdict::Done
    } else if refused >= quorum {
        Verdict::Refused
    } else {
        Verdict::Unavailable
    }
}

/// Whether the verdict is known before every one of `n` servers answered: a majority did
/// it, a majority refused, or too few are left to make a majority.
pub fn settled(done: usize, refused: usize, failed: usize, n: usize, quorum: usize) -> bool {
    let open = n - refused - failed;
    done >= quorum || refused >= quorum || open < quorum
}

/// `renewed on 1 of 3 servers, 2 needed`.
pub fn done_on(verb: &str, k: usize, n: usize, quorum: usize) -> String {
    format!("{verb} on {k} of {n} servers, {quorum} needed")
}

/// `1 of 3 servers answered, 2 needed`.
pub fn answered(k: usize, n: usize, quorum: usize) -> String {
    format!("{k} of {n} servers answered, {quorum} needed")
}

/// The owner named by at least `quorum` of `owners` (one per server that has a lease).
pub fn majority_owner<'a>(
    owners: impl IntoIterator<Item = &'a str>,
    quorum: usize,
) -> Option<&'a str> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for owner in owners {
        *counts.entry(owner).or_default() += 1;
    }
    counts
        .into_iter()
        .find(|(_, n)| *n >= quorum)
        .map(|(owner, _)| owner)
}

/// The owner named most often among `owners`, if any.
pub fn most_named<'a>(owners: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for owner in owners {
        *counts.entry(owner).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(owner, _)| owner)
}

/// How long a lease kept on several servers lasts: while a majority still has it, so the
/// `quorum`-th longest of the TTLs left (at least `quorum` of them).
pub fn quorum_ttl(mut ttls: Vec<u64>, quorum: usize) -> u64 {
    ttls.sort_unstable_by(|a, b| b.cmp(a));
    ttls[quorum - 1]
}
