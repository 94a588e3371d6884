//! How a SQL store's failure reads (one line, the key named) and whether the next try may
//! well not meet it.

use std::time::Duration;

use crate::error::Error;
pub use crate::error::{io_error, passing_io};

/// `what` on the server `name` got no answer within `limit`: a paused server, or a
/// statement stuck behind a row lock. The connection is dropped and made again by the next
/// try, which may well be answered.
pub fn no_answer(name: &str, what: &str, limit: Duration) -> Error {
    Error::Transient(format!(
        "{name}: {what}: no answer within {}",
        humantime::format_duration(limit)
    ))
}

/// A failed request, `msg` its one line: [`Error::Transient`] when the next try may well
/// not meet it (`passing`), else [`Error::Unavailable`].
pub fn failure(passing: bool, msg: String) -> Error {
    match passing {
        true => Error::Transient(msg),
        false => Error::Unavailable(msg),
    }
}

/// SQLSTATEs that mean the same on both servers and pass: class 08, the connection failed
/// (made again by the next try), and a transaction [`rolled_back`].
pub fn passing_state(state: &str) -> bool {
    state.starts_with("08") || rolled_back(state)
}

/// The server rolled the whole transaction back to break a deadlock (40P01; MySQL says
/// 40001 for it too) or a serialization conflict (40001): nothing of it was kept, and
/// running it again at once is the answer.
pub fn rolled_back(state: &str) -> bool {
    matches!(state, "40001" | "40P01")
}

/// `e`, a failure of a request about `key` on the server `name`, naming the key: the
/// server's own messages ("NAME: cannot acquire: …") become "lock 'KEY' on NAME: …".
pub fn naming(key: &str, name: &str, e: Error) -> Error {
    e.map_message(|m| match m.strip_prefix(name) {
        Some(rest) if rest.starts_with(": ") => format!("lock '{key}' on {name}{rest}"),
        _ => m,
    })
}

#[cfg(test)]
mod tests {
    use super::{naming, no_answer, passing_state};

    #[test]
    fn failures_that_pass_and_the_key_named() {
        assert!(passing_state("40001") && passing_state("40P01") && passing_state("08006"));
        assert!(!passing_state("28P01") && !passing_state("42501") && !passing_state("22003"));
        let name = "postgres://u:***@h:1/db";
        let e = no_answer(name, "cannot acquire", std::time::Duration::from_secs(3));
        assert!(e.is_retryable());
        let e = naming("k", name, e);
        assert!(e.is_retryable());
        assert_eq!(
            e.to_string(),
            format!("lock 'k' on {name}: cannot acquire: no answer within 3s")
        );
        let other = crate::error::Error::Unavailable("lock 'k' is held".into());
        assert_eq!(naming("k", name, other).to_string(), "lock 'k' is held");
    }
}
