//! What the SQL stores (PostgreSQL, MySQL) share: the names they accept for their tables,
//! and how a lease row reads as a [`LockInfo`].

use super::{Holder, LockInfo};

/// A table name dlock accepts: plain lower-case, so that it needs no quoting rules of its
/// own in either dialect and leaves room for the `_waiters` suffix. The error completes
/// "table …".
pub fn identifier(name: &str) -> std::result::Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match ok {
        true => Ok(name.to_string()),
        false => Err(format!(
            "'{name}' must be lower-case letters, digits and '_' (at most 48)"
        )),
    }
}

/// The holder JSON of a row (a row written by hand may lack it).
pub fn holder_of(json: Option<&str>) -> Holder {
    json.and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

/// A live lease as `status` and a refusal show it.
pub fn info(
    key: &str,
    owner: &str,
    token: i64,
    depth: i32,
    holder: Option<&str>,
    left_ms: i64,
) -> LockInfo {
    LockInfo {
        key: key.to_string(),
        owner: owner.to_string(),
        fencing_token: token.max(0) as u64,
        holder: holder_of(holder),
        ttl_left_ms: Some(left_ms.max(0) as u64),
        depth: depth.max(0) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::identifier;

    #[test]
    fn identifiers() {
        assert!(identifier("dlock_locks2").is_ok());
        assert!(identifier("_x").is_ok());
        for bad in ["", "Bad", "a;drop", "1a", "a-b", &"x".repeat(49)] {
            assert!(identifier(bad).is_err(), "{bad}");
        }
    }
}
