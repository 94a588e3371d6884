//! `dlock status [KEY...]`: who holds what, and for named keys how their last run went.

use super::common::last_runs;
use crate::backend::sharing::Admission;
use crate::backend::waiting;
use crate::backend::{KeyStatus, Sharing};
use crate::cli::{Global, StatusArgs};
use crate::config::check_key;
use crate::error::{Error, Result};
use crate::{exit, output};

/// Prints the state of the named keys (or every held lock); exit 1 when a named key is free.
/// Listing every lock goes on past keys that cannot be read: each gets a line on stderr,
/// and the exit code is then that of the first such error (70 for a damaged file), after
/// everything readable was printed.
pub async fn run(global: &Global, args: StatusArgs) -> Result<u8> {
    for key in &args.keys {
        check_key(key)?;
    }
    if args.watch {
        return super::watch::run(global, &args.keys).await;
    }
    let until = super::common::one_shot();
    let (_, backend) = super::common::open(global, None, until).await?;
    // A store that connects at its first request is ridden out there, as at opening.
    let (b, keys) = (&backend, &args.keys);
    let read = move || async move {
        if keys.is_empty() {
            let listing = b.list().await?;
            Ok((listing.held, listing.unreadable))
        } else {
            Ok((b.status(keys).await?, Vec::new()))
        }
    };
    let (states, unreadable) = waiting::reach(&backend.describe(), until, read).await?;
    let runs = last_runs(&*backend, &args.keys, !global.quiet).await;
    let backend_name = backend.describe();
    if global.json {
        for (i, s) in states.iter().enumerate() {
            let line = output::StatusJson::new(s, &backend_name);
            match runs.get(i) {
                Some(Some(r)) => output::print_json(&line.with_runs(r)),
                _ => output::print_json(&line),
            }
        }
    } else if !states.is_empty() || unreadable.is_empty() {
        for line in output::status_lines(&states, &runs, &backend_name) {
            let _ = output::write_line(&line);
        }
    }
    if let Some(code) = unreadable.first().map(Error::exit_code) {
        for e in &unreadable {
            crate::say!("{e}");
        }
        return Ok(code);
    }
    Ok(exit_code(&states, args.sharing.sharing()))
}

/// 0 when a caller asking for `sharing` could take none of the keys shown now (held, or
/// held in a way it must not join), 1 when one has room for it. For the default exclusive
/// caller: 0 when every key is held, 1 when one is free.
pub fn exit_code(states: &[KeyStatus], sharing: Sharing) -> u8 {
    let no_room = |s: &KeyStatus| {
        let holders = s.holders.len().max(1) as u32;
        s.lock.is_some() && sharing.admit(Some(s.sharing), holders, &[]) != Admission::Admit
    };
    if states.iter().all(no_room) {
        exit::OK
    } else {
        exit::FREE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Holder, LockInfo};

    /// A key held by `holders` holders as `sharing` (none: free).
    fn key(sharing: Sharing, holders: usize) -> KeyStatus {
        let holder = |i: usize| LockInfo {
            key: "k".into(),
            owner: format!("o{i}"),
            fencing_token: i as u64,
            holder: Holder::default(),
            ttl_left_ms: None,
            depth: 1,
        };
        KeyStatus::group("k", sharing, (0..holders).map(holder).collect())
    }

    #[test]
    fn the_exit_code_says_whether_a_caller_like_this_one_has_room() {
        use Sharing::{Exclusive, Limit, Shared};
        assert_eq!(exit_code(&[key(Exclusive, 1)], Exclusive), exit::OK);
        assert_eq!(exit_code(&[key(Exclusive, 0)], Exclusive), exit::FREE);
        // Any holder makes a key "held" for an exclusive caller, readers too.
        assert_eq!(exit_code(&[key(Shared, 2)], Exclusive), exit::OK);
        assert_eq!(exit_code(&[key(Shared, 2)], Shared), exit::FREE);
        assert_eq!(exit_code(&[key(Exclusive, 1)], Shared), exit::OK);
        assert_eq!(exit_code(&[key(Limit(3), 2)], Limit(3)), exit::FREE);
        assert_eq!(exit_code(&[key(Limit(3), 3)], Limit(3)), exit::OK);
        // Held as another N: no room for this caller either.
        assert_eq!(exit_code(&[key(Limit(2), 1)], Limit(3)), exit::OK);
        assert_eq!(
            exit_code(&[key(Limit(3), 3), key(Limit(3), 1)], Limit(3)),
            exit::FREE
        );
    }
}
