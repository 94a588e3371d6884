//! The fencing counter, and what can be told of its loss.
//!
//! The counter is an item that never expires, created on first use by `ma` with
//! auto-create. Memcached may still lose it: a restart empties the server, and without
//! `-M` the LRU may evict it. A counter created anew starts at the creating host's clock
//! in microseconds, so that it starts above every token the lost one handed out as long
//! as that one was created earlier on a clock not ahead of ours, and handed out fewer
//! tokens than microseconds have passed since (each acquisition takes several round
//! trips). What can be checked is checked, and a lower token is refused:
//! * a token not above the highest this process saw for the lock;
//! * a token not above the one in the lock's last-run record;
//! * a counter missing while its lock is held: the holder recreates it above its token.
//!
//! Not detected: a counter recreated by a host whose clock is behind, for a lock whose
//! last-run record was lost too (or never written: `dlock lock`), by a process that never
//! saw the higher tokens.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::error::{Error, Result};

/// The highest token this process saw, per backend and lock.
static SEEN: LazyLock<Mutex<HashMap<(String, String), u64>>> = LazyLock::new(Default::default);

/// The value a counter created now starts at: the wall clock in microseconds.
pub fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
        .max(1)
}

/// The `ma` flags that take the next token, creating the counter at `start` if it is gone.
pub fn next_flags(start: u64) -> String {
    format!("N0 J{start} v")
}

/// Remembers that `token` was seen for `key`.
pub fn saw(backend: &str, key: &str, token: u64) {
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    let high = seen
        .entry((backend.to_string(), key.to_string()))
        .or_default();
    *high = (*high).max(token);
}

/// The highest token this process saw for `key` on `backend`, 0 when none.
pub fn highest_seen(backend: &str, key: &str) -> u64 {
    let seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    seen.get(&(backend.to_string(), key.to_string()))
        .copied()
        .unwrap_or(0)
}

/// Refuses `token` unless it is above `floor` (from the last-run record) and above
/// every token this process saw for `key`.
pub fn check(backend: &str, key: &str, token: u64, floor: u64) -> Result<()> {
    let high = highest_seen(backend, key).max(floor);
    if token > high {
        return Ok(());
    }
    Err(Error::Unavailable(format!(
        "{backend}: lock '{key}': the fencing counter went back (token {token}, after {high}): memcached lost it (restart or eviction) and a host with a clock behind recreated it; refusing to hand out a lower token (run memcached with -M, keep clocks in sync)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_tokens_are_refused() {
        let b = "memcached://fence-test:1";
        assert!(check(b, "k", 5, 0).is_ok());
        saw(b, "k", 5);
        assert!(check(b, "k", 6, 0).is_ok());
        let e = check(b, "k", 5, 0).unwrap_err();
        assert_eq!(e.exit_code(), 69);
        assert!(e.to_string().contains("'k'"), "{e}");
        assert!(check(b, "k", 7, 9).is_err());
        assert!(check(b, "other", 1, 0).is_ok());
        assert!(seed() > 1_600_000_000_000_000);
    }
}
