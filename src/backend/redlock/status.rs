//! `status` on a quorum: each server's view of a key, and the lock a majority agrees on.

use std::collections::HashMap;

use super::RedlockBackend;
use crate::backend::quorum::votes;
use crate::backend::{KeyStatus, LockInfo, ServerView};

impl RedlockBackend {
    /// The per-key view of every server, and the lock a majority agrees on.
    pub(super) fn combine(
        &self,
        key: &str,
        views: &[Result<HashMap<String, LockInfo>, String>],
    ) -> KeyStatus {
        let owners = views
            .iter()
            .flatten()
            .filter_map(|locks| locks.get(key).map(|l| l.owner.as_str()));
        let winner = votes::majority_owner(owners, self.quorum).map(str::to_string);
        let mut agreeing: Vec<&LockInfo> = Vec::new();
        let mut servers = Vec::with_capacity(views.len());
        for (member, view) in self.members.iter().zip(views) {
            let server = member.shown.clone();
            servers.push(match view {
                Ok(locks) => {
                    let lock = locks.get(key);
                    let agrees = lock.is_some_and(|l| Some(&l.owner) == winner.as_ref());
                    if let (true, Some(l)) = (agrees, lock) {
                        agreeing.push(l);
                    }
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
        let lock = (agreeing.len() >= self.quorum).then(|| {
            let ttls = agreeing
                .iter()
                .map(|l| l.ttl_left_ms.unwrap_or(0))
                .collect();
            let newest = agreeing
                .iter()
                .max_by_key(|l| l.fencing_token)
                .copied()
                .cloned();
            newest.map(|l| LockInfo {
                ttl_left_ms: Some(votes::quorum_ttl(ttls, self.quorum)),
                ..l
            })
        });
        KeyStatus {
            key: key.to_string(),
            lock: lock.flatten(),
            waiters: None,
            servers: Some(servers),
        }
    }
}
