//! How the holders this process acquired on a quorum hold their keys, so that their
//! renewals count against the quorum their sharing needs
//! ([`votes::quorum_for`](super::votes::quorum_for)) without asking the servers.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::backend::Sharing;

/// How the holders this process acquired hold their keys, by (key, owner), until released.
#[derive(Default)]
pub struct Modes(Mutex<HashMap<(String, String), Sharing>>);

impl Modes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Sharing>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn acquired(&self, key: &str, owner: &str, sharing: Sharing) {
        self.lock()
            .insert((key.to_string(), owner.to_string()), sharing);
    }

    pub fn released(&self, key: &str, owner: &str) {
        self.lock().remove(&(key.to_string(), owner.to_string()));
    }

    pub fn get(&self, key: &str, owner: &str) -> Option<Sharing> {
        self.lock()
            .get(&(key.to_string(), owner.to_string()))
            .copied()
    }
}
