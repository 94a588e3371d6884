//! Turning the servers' answers to a request sent to every server into the quorum's
//! answer: the error of a renewal or release without a majority, the run records kept and
//! read on a majority, and `status` combined from each server's view. Pure functions over
//! the replies, shared by every quorum (Redlock, the memcached quorum).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};

use super::votes::{self, Verdict};
use crate::backend::{KeyStatus, LastRuns, Lease, LockInfo, Released, ServerView, Sharing};
use crate::error::{Error, Result};

/// Joins per-server error messages into one line.
pub fn joined(errors: &[Error]) -> String {
    let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    lines.join("; ")
}

/// The error `msg` of too few servers answering, `failed` saying why the others did not:
/// [`Error::Transient`] when each of them may come back (refused, lost or silent
/// connections), which the caller rides out within the time allowed; else `Unavailable`.
pub fn short_of_majority<E: std::borrow::Borrow<Error>>(failed: &[E], msg: String) -> Error {
    match !failed.is_empty() && failed.iter().all(|e| e.borrow().is_retryable()) {
        true => Error::Transient(msg),
        false => Error::Unavailable(msg),
    }
}

/// The error of a renewal or release that did not get a majority: `NotOwner` when a
/// majority refused (the caller surely lost the lease), else as [`short_of_majority`]
/// says of the servers that failed (`errors`, refusals among them, are not counted).
pub fn refusal(verdict: Verdict, errors: &[Error], msg: String) -> Error {
    match verdict {
        Verdict::Refused => Error::NotOwner(msg),
        _ => short_of_majority(&not_refusals(errors), msg),
    }
}

/// The failures among `errors` that are not a server's refusal (`NotOwner`).
fn not_refusals(errors: &[Error]) -> Vec<&Error> {
    let failed = errors.iter().filter(|e| !matches!(e, Error::NotOwner(_)));
    failed.collect()
}

/// The answers to a renewal sent to every server, gathered until the outcome is known.
#[derive(Default)]
pub struct Renewals {
    pub renewed: Vec<Lease>,
    /// The servers that said the caller is not the owner.
    pub refused: Vec<Error>,
    pub failed: Vec<Error>,
    /// How many servers were asked.
    pub asked: usize,
}

/// Gathers renewal answers as they come, and stops as soon as the verdict is known: a
/// dead server does not slow a renewal down (the requests still pending are dropped).
pub async fn gather_renewals<F>(calls: Vec<F>, quorum: usize) -> Renewals
where
    F: Future<Output = Result<Lease>>,
{
    let asked = calls.len();
    let mut pending: FuturesUnordered<F> = calls.into_iter().collect();
    let mut r = Renewals {
        asked,
        ..Renewals::default()
    };
    while let Some(reply) = pending.next().await {
        match reply {
            Ok(lease) => r.renewed.push(lease),
            Err(e @ Error::NotOwner(_)) => r.refused.push(e),
            Err(e) => r.failed.push(e),
        }
        if votes::settled(
            r.renewed.len(),
            r.refused.len(),
            r.failed.len(),
            asked,
            quorum,
        ) {
            break;
        }
    }
    r
}

/// The lease a renewal gave when a majority renewed: `ttl` counted from `granted_at`
/// (when the requests were sent, or earlier on a store whose items may expire early),
/// less the clock drift, with the largest of the servers' tokens.
pub fn renewed(
    name: &str,
    (key, owner): (&str, &str),
    (ttl, granted_at): (Duration, Instant),
    r: Renewals,
    quorum: usize,
) -> Result<Lease> {
    let verdict = votes::verdict(r.renewed.len(), r.refused.len(), quorum);
    if verdict == Verdict::Done {
        let Some(validity) = votes::validity(ttl, granted_at.elapsed()) else {
            // Slow servers may answer the next renewal in time: transient.
            return Err(Error::Transient(format!(
                "cannot renew lock '{key}' on {name}: the servers answered too late for the lease to be valid"
            )));
        };
        let token = r.renewed.iter().map(|l| l.fencing_token).max().unwrap_or(0);
        let lease = Lease::timed(key, owner, token, ttl, false, granted_at);
        return Ok(lease.expiring_in(validity));
    }
    let errors: Vec<Error> = r.refused.into_iter().chain(r.failed).collect();
    let msg = format!(
        "cannot renew lock '{key}' on {name}: {}: {}",
        votes::done_on("renewed", r.renewed.len(), r.asked, quorum),
        joined(&errors)
    );
    Err(refusal(verdict, &errors, msg))
}

/// A release sent to every server: done when a majority released (the previous owner
/// is the one most of them named), `NotOwner` when a majority refused.
pub fn released(
    name: &str,
    key: &str,
    replies: Vec<Result<Released>>,
    quorum: usize,
) -> Result<Released> {
    let n = replies.len();
    let (mut released, mut errors) = (Vec::new(), Vec::new());
    for reply in replies {
        match reply {
            Ok(r) => released.push(r),
            Err(e) => errors.push(e),
        }
    }
    let refused = errors
        .iter()
        .filter(|e| matches!(e, Error::NotOwner(_)))
        .count();
    let verdict = votes::verdict(released.len(), refused, quorum);
    if verdict == Verdict::Done {
        let owners = released.iter().filter_map(|r| r.previous_owner.as_deref());
        let previous_owner = votes::most_named(owners).map(str::to_string);
        let still = released.iter().filter(|r| r.still_held).count();
        return Ok(Released {
            previous_owner,
            still_held: still >= quorum,
        });
    }
    let msg = format!(
        "cannot release lock '{key}' on {name}: {}: {}",
        votes::done_on("released", released.len(), n, quorum),
        joined(&errors)
    );
    Err(refusal(verdict, &errors, msg))
}

/// A request every server must do (hold a lease on, `exec --hold-at-least`): done
/// when a majority did it.
pub fn done_on_majority(
    what: &str,
    name: &str,
    replies: Vec<Result<()>>,
    quorum: usize,
) -> Result<()> {
    let n = replies.len();
    let errors: Vec<Error> = replies.into_iter().filter_map(Result::err).collect();
    if n - errors.len() >= quorum {
        return Ok(());
    }
    let msg = format!(
        "{what} on {name}: {}: {}",
        votes::done_on("held on", n - errors.len(), n, quorum),
        joined(&errors)
    );
    Err(short_of_majority(&errors, msg))
}

/// A run record written to every server counts as kept when a majority stored it.
/// `replies` in server order; `name` is the quorum's, for messages.
pub fn run_kept(name: &str, key: &str, replies: Vec<Result<()>>, quorum: usize) -> Result<()> {
    let n = replies.len();
    let kept = replies.iter().filter(|r| r.is_ok()).count();
    if kept >= quorum {
        return Ok(());
    }
    let errors: Vec<Error> = replies.into_iter().filter_map(Result::err).collect();
    let msg = format!(
        "cannot record the run of '{key}' on {name}: {kept} of {n} servers kept it, {quorum} needed: {}",
        joined(&errors)
    );
    Err(short_of_majority(&errors, msg))
}

/// The newest records a majority of servers tell of: any two majorities share a server,
/// so a read sees every record whose write reached a majority.
pub fn newest_runs(
    name: &str,
    key: &str,
    replies: Vec<Result<LastRuns>>,
    quorum: usize,
) -> Result<LastRuns> {
    let n = replies.len();
    let answered = replies.iter().filter(|r| r.is_ok()).count();
    if answered < quorum {
        let errors: Vec<Error> = replies.into_iter().filter_map(Result::err).collect();
        let msg = format!(
            "cannot read the last run of '{key}' on {name}: {}: {}",
            votes::answered(answered, n, quorum),
            joined(&errors)
        );
        return Err(short_of_majority(&errors, msg));
    }
    Ok(LastRuns::newest(replies.into_iter().flatten()))
}

/// One server's held keys, by key, or why it did not answer.
pub type View = std::result::Result<HashMap<String, KeyStatus>, String>;

/// `status` on a quorum: every server's reply (in the order of `servers`, their
/// redacted names) combined. The named keys in order, or, with none, every lock a
/// majority agrees on, sorted by key. An error ([`short_of_majority`]) when fewer than a
/// majority answered.
pub fn status(
    name: &str,
    servers: &[String],
    keys: &[String],
    replies: Vec<Result<Vec<KeyStatus>>>,
    quorum: usize,
) -> Result<Vec<KeyStatus>> {
    let answered = replies.iter().filter(|r| r.is_ok()).count();
    if answered < quorum {
        let errors: Vec<Error> = replies.into_iter().filter_map(Result::err).collect();
        let msg = format!(
            "cannot read lock status on {name}: {}: {}",
            votes::answered(answered, servers.len(), quorum),
            joined(&errors)
        );
        return Err(short_of_majority(&errors, msg));
    }
    let views: Vec<View> = replies
        .into_iter()
        .map(|r| {
            r.map(|states| {
                states
                    .into_iter()
                    .filter(|s| s.lock.is_some())
                    .map(|s| (s.key.clone(), s))
                    .collect()
            })
            .map_err(|e| e.to_string())
        })
        .collect();
    if !keys.is_empty() {
        return Ok(keys
            .iter()
            .map(|k| combine(k, servers, &views, quorum))
            .collect());
    }
    let names: BTreeSet<&String> = views.iter().flatten().flat_map(|m| m.keys()).collect();
    Ok(names
        .into_iter()
        .map(|k| combine(k, servers, &views, quorum))
        .filter(|s| s.lock.is_some())
        .collect())
}

/// The per-key view of every server, and the lock a majority agrees on: the newest of
/// the agreeing leases, lasting while a majority still has it. A key held shared or as a
/// semaphore lists every holder a majority has (see [`group`]), the first on top; each
/// server's view shows the first holder it has.
pub fn combine(key: &str, servers: &[String], views: &[View], quorum: usize) -> KeyStatus {
    let (holders, sharing) = group(key, views, quorum);
    if let Some(first) = holders.first() {
        let owner = first.owner.clone();
        let shown = server_views(key, servers, views, |st| {
            st.holders.iter().any(|h| h.owner == owner)
        });
        return KeyStatus::group(key, sharing, holders).with_servers(shown);
    }
    let owners = views
        .iter()
        .flatten()
        .filter_map(|locks| locks.get(key).and_then(|s| s.lock.as_ref()))
        .map(|l| l.owner.as_str());
    let winner = votes::majority_owner(owners, quorum).map(str::to_string);
    let agrees = |st: &KeyStatus| {
        st.lock
            .as_ref()
            .is_some_and(|l| Some(&l.owner) == winner.as_ref())
    };
    let agreeing: Vec<&LockInfo> = views
        .iter()
        .flatten()
        .filter_map(|locks| locks.get(key))
        .filter(|st| agrees(st))
        .filter_map(|st| st.lock.as_ref())
        .collect();
    let shown = server_views(key, servers, views, agrees);
    let lock = (agreeing.len() >= quorum).then(|| lasting(&agreeing, quorum));
    KeyStatus::exclusive(key, lock.flatten()).with_servers(shown)
}

/// The newest of the leases `agreeing` servers have of one holder, lasting while
/// `quorum` of them still have it.
fn lasting(agreeing: &[&LockInfo], quorum: usize) -> Option<LockInfo> {
    let ttls = agreeing
        .iter()
        .map(|l| l.ttl_left_ms.unwrap_or(0))
        .collect();
    let newest = agreeing.iter().max_by_key(|l| l.fencing_token).copied();
    newest.map(|l| LockInfo {
        ttl_left_ms: Some(votes::quorum_ttl(ttls, quorum)),
        ..l.clone()
    })
}

/// The holders of a key held shared or as a semaphore that `quorum` servers have, in
/// the order they were granted (by token), and how they hold it (as most servers say).
/// None when the key is not held so.
pub fn group(key: &str, views: &[View], quorum: usize) -> (Vec<LockInfo>, Sharing) {
    let groups: Vec<&KeyStatus> = views
        .iter()
        .flatten()
        .filter_map(|locks| locks.get(key))
        .filter(|st| !st.holders.is_empty())
        .collect();
    let mut modes: HashMap<Sharing, usize> = HashMap::new();
    let mut seen: HashMap<&str, Vec<&LockInfo>> = HashMap::new();
    for st in &groups {
        *modes.entry(st.sharing).or_default() += 1;
        for h in &st.holders {
            seen.entry(h.owner.as_str()).or_default().push(h);
        }
    }
    let mut holders: Vec<LockInfo> = seen
        .into_values()
        .filter(|leases| leases.len() >= quorum)
        .filter_map(|leases| lasting(&leases, quorum))
        .collect();
    holders.sort_by_key(|h| h.fencing_token);
    let sharing = modes
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map_or(Sharing::Exclusive, |(s, _)| s);
    (holders, sharing)
}

/// What each server sees of `key`: the first holder it has, and whether it `agrees`
/// with the quorum's answer.
fn server_views(
    key: &str,
    servers: &[String],
    views: &[View],
    agrees: impl Fn(&KeyStatus) -> bool,
) -> Vec<ServerView> {
    let mut shown = Vec::with_capacity(views.len());
    for (server, view) in servers.iter().zip(views) {
        let server = server.clone();
        shown.push(match view {
            Ok(locks) => {
                let st = locks.get(key);
                let lock = st.and_then(|s| s.lock.as_ref());
                let agrees = st.is_some_and(&agrees);
                ServerView {
                    server,
                    owner: lock.map(|l| l.owner.clone()),
                    fencing_token: lock.map(|l| l.fencing_token),
                    ttl_left_ms: lock.and_then(|l| l.ttl_left_ms),
                    agrees,
                    error: None,
                }
            }
            Err(e) => ServerView {
                // The message names the server, which the view already does.
                error: Some(
                    e.strip_prefix(&format!("{server}: "))
                        .unwrap_or(e)
                        .to_string(),
                ),
                server,
                owner: None,
                fencing_token: None,
                ttl_left_ms: None,
                agrees: false,
            },
        });
    }
    shown
}
