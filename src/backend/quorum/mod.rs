//! Locks held on a majority of independent servers: what every such quorum shares,
//! whatever the store of each server (Redlock over Redis, the memcached quorum).
//!
//! * [`votes`]: counting the servers' answers, deciding, settling, and the wording of
//!   the counts, as pure functions.
//! * [`modes`]: how the holders this process acquired hold their keys.
//! * [`outcome`]: the quorum's answer to a request sent to every server (renew and
//!   release errors, run records, `status` combined from each server's view).
//! * [`round`]: why one server's request failed, aligning the fencing counters after an
//!   acquire round, and taking back.
//! * [`renew`]: a renewal on as many servers as the holder's sharing needs.

pub mod modes;
pub mod outcome;
pub mod renew;
pub mod round;
pub mod votes;

#[cfg(test)]
mod tests;
