//! Which advisory lock a KEY names, and how `pg_locks` shows it.

/// Which advisory lock a KEY names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockId {
    /// `pg_advisory_lock(bigint)`.
    One(i64),
    /// `pg_advisory_lock(int, int)`.
    Two(i32, i32),
}

impl LockId {
    /// The lock a KEY names without asking the server: a decimal bigint or `A,B`; `None`
    /// for any other KEY, which the server hashes (`hashtextextended(KEY, 0)`).
    pub fn literal(key: &str) -> Option<LockId> {
        if let Some((a, b)) = key.split_once(',') {
            return Some(LockId::Two(a.trim().parse().ok()?, b.trim().parse().ok()?));
        }
        key.parse().ok().map(LockId::One)
    }

    /// The arguments of the `pg_advisory_*` functions, as SQL literals.
    pub fn args(&self) -> String {
        match self {
            LockId::One(v) => format!("{v}::bigint"),
            LockId::Two(a, b) => format!("{a}::int, {b}::int"),
        }
    }

    /// How `pg_locks` shows it: (classid, objid, objsubid).
    #[cfg(test)]
    pub fn pg_locks(&self) -> (u32, u32, i16) {
        match *self {
            LockId::One(v) => ((v >> 32) as u32, v as u32, 1),
            LockId::Two(a, b) => (a as u32, b as u32, 2),
        }
    }

    /// The lock a `pg_locks` row shows.
    pub fn from_pg_locks(classid: u32, objid: u32, objsubid: i16) -> LockId {
        match objsubid {
            2 => LockId::Two(classid as i32, objid as i32),
            _ => LockId::One(((classid as u64) << 32 | objid as u64) as i64),
        }
    }
}

impl std::fmt::Display for LockId {
    /// As a KEY names it: `N` or `A,B`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockId::One(v) => write!(f, "{v}"),
            LockId::Two(a, b) => write!(f, "{a},{b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LockId;

    #[test]
    fn keys_name_locks() {
        assert_eq!(LockId::literal("42"), Some(LockId::One(42)));
        assert_eq!(LockId::literal("-7"), Some(LockId::One(-7)));
        assert_eq!(LockId::literal("1,2"), Some(LockId::Two(1, 2)));
        assert_eq!(LockId::literal("nightly"), None);
        assert_eq!(LockId::literal("1,x"), None);
        assert_eq!(LockId::literal("99999999999999999999"), None);
    }

    #[test]
    fn pg_locks_round_trip() {
        for id in [
            LockId::One(0),
            LockId::One(-1),
            LockId::One(i64::MIN),
            LockId::One(1 << 40 | 5),
            LockId::Two(-3, 7),
        ] {
            let (c, o, s) = id.pg_locks();
            assert_eq!(LockId::from_pg_locks(c, o, s), id);
        }
    }
}
