//! How a [`KeyStatus`] is built, so that every store states a key's state by the same
//! rules: a free key has no holder and is exclusive; an exclusive key shows its one holder
//! as `lock` only; a key held shared or as a semaphore lists every holder, the first also
//! as `lock`; waiters are `None` until a store says it can list them.

use super::{KeyStatus, LockInfo, ServerView, Sharing, WaiterInfo};

impl KeyStatus {
    /// Nobody holds `key`.
    pub fn free(key: impl Into<String>) -> KeyStatus {
        KeyStatus {
            key: key.into(),
            lock: None,
            holders: Vec::new(),
            sharing: Sharing::Exclusive,
            waiters: None,
            servers: None,
        }
    }

    /// `key` held exclusively by `lock`, or free when there is none.
    pub fn exclusive(key: impl Into<String>, lock: Option<LockInfo>) -> KeyStatus {
        KeyStatus {
            lock,
            ..KeyStatus::free(key)
        }
    }

    /// `key` held as `sharing` by `holders`, first granted first. One exclusive holder is
    /// shown as `lock` only (the JSON of an exclusive lock keeps its shape); no holder at
    /// all is a free key, whatever `sharing` the store last recorded.
    pub fn group(key: impl Into<String>, sharing: Sharing, holders: Vec<LockInfo>) -> KeyStatus {
        if holders.is_empty() {
            return KeyStatus::free(key);
        }
        if sharing.is_exclusive() && holders.len() == 1 {
            return KeyStatus::exclusive(key, holders.into_iter().next());
        }
        KeyStatus {
            lock: holders.first().cloned(),
            holders,
            sharing,
            ..KeyStatus::free(key)
        }
    }

    /// The same state, with the waiters in queue order.
    pub fn with_waiters(self, waiters: Vec<WaiterInfo>) -> KeyStatus {
        KeyStatus {
            waiters: Some(waiters),
            ..self
        }
    }

    /// The same state, with what each server of a quorum sees.
    pub fn with_servers(self, servers: Vec<ServerView>) -> KeyStatus {
        KeyStatus {
            servers: Some(servers),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Holder;

    fn info(owner: &str, token: u64) -> LockInfo {
        LockInfo {
            key: "k".into(),
            owner: owner.into(),
            fencing_token: token,
            holder: Holder::default(),
            ttl_left_ms: None,
            depth: 1,
        }
    }

    #[test]
    fn one_exclusive_holder_is_the_lock_alone_and_no_holder_is_free() {
        let one = KeyStatus::group("k", Sharing::Exclusive, vec![info("a", 1)]);
        assert_eq!(one, KeyStatus::exclusive("k", Some(info("a", 1))));
        assert!(one.holders.is_empty() && one.sharing.is_exclusive());
        let none = KeyStatus::group("k", Sharing::Limit(3), Vec::new());
        assert_eq!(none, KeyStatus::free("k"));
        assert_eq!(KeyStatus::exclusive("k", None), KeyStatus::free("k"));
    }

    #[test]
    fn a_group_lists_every_holder_and_its_first_as_the_lock() {
        let st = KeyStatus::group("k", Sharing::Shared, vec![info("a", 1), info("b", 2)]);
        assert_eq!(st.lock.as_ref().map(|l| l.owner.as_str()), Some("a"));
        assert_eq!(st.holders.len(), 2);
        assert_eq!(st.sharing, Sharing::Shared);
        // Two exclusive holders at once (a store's damaged record) are both shown.
        let two = KeyStatus::group("k", Sharing::Exclusive, vec![info("a", 1), info("b", 2)]);
        assert_eq!(two.holders.len(), 2);
        assert_eq!(st.waiters, None);
        assert_eq!(st.with_waiters(Vec::new()).waiters, Some(Vec::new()));
    }
}
