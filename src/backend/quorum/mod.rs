//! Locks held on a majority of independent servers: what every such quorum shares,
//! whatever the store of each server (Redlock over Redis today).
//!
//! * [`votes`]: counting the servers' answers, deciding, settling, and the wording of
//!   the counts, as pure functions.

pub mod votes;

#[cfg(test)]
mod tests;
