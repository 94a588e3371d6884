//! Key → file name: readable where possible, always safe, bounded in length.
//!
//! Bytes in `[A-Za-z0-9._-]` stay as they are (except a leading `.`, so names are never
//! hidden, `.` or `..`); every other byte becomes `%XX`. Names longer than [`MAX_STEM`] keep
//! a readable prefix and end in `~` plus a 128-bit hash of the whole key (`~` is always
//! encoded in the readable part, so the suffix cannot be confused with it). Two keys could
//! only share a file through a hash collision, which is detected: the file stores its key.

use std::fmt::Write;

/// File name suffix of a key file.
pub const SUFFIX: &str = ".dlock";
/// Longest stem (name without suffix); NAME_MAX is 255 on every Linux file system.
const MAX_STEM: usize = 200;
/// Readable prefix kept in front of the hash of a long key.
const PREFIX: usize = 160;

/// The file name (not a path) of `key`'s file.
pub fn file_name(key: &str) -> String {
    let mut stem = String::with_capacity(key.len());
    for (i, b) in key.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            stem.push(b as char);
        } else {
            let _ = write!(stem, "%{b:02X}");
        }
    }
    if stem.len() > MAX_STEM {
        let mut cut = PREFIX;
        // Never cut inside a %XX escape.
        let inside_escape = |c: usize| {
            let b = stem.as_bytes();
            (c >= 1 && b[c - 1] == b'%') || (c >= 2 && b[c - 2] == b'%')
        };
        while inside_escape(cut) {
            cut -= 1;
        }
        stem.truncate(cut);
        let (h1, h2) = hash128(key.as_bytes());
        let _ = write!(stem, "~{h1:016x}{h2:016x}");
    }
    stem.push_str(SUFFIX);
    stem
}

/// True for names that [`file_name`] can produce (not temp files, not foreign files).
pub fn is_key_file(name: &str) -> bool {
    name.ends_with(SUFFIX) && !name.starts_with('.')
}

/// FNV-1a, 64 bits: a stable (never changes between releases), dependency-free hash. It
/// guards against torn writes and names long keys; it is not meant to resist an attacker.
pub fn fnv1a(parts: &[&[u8]], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn hash128(bytes: &[u8]) -> (u64, u64) {
    (fnv1a(&[bytes], 0), fnv1a(&[bytes], 0x9e37_79b9_7f4a_7c15))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_keys_stay_readable() {
        assert_eq!(file_name("backup-db_1.x"), "backup-db_1.x.dlock");
        assert_eq!(file_name("a/b c"), "a%2Fb%20c.dlock");
        assert_eq!(file_name(".."), "%2E..dlock");
        assert_eq!(file_name("50%"), "50%25.dlock");
        assert_eq!(file_name("é"), "%C3%A9.dlock");
        assert!(is_key_file(&file_name(".hidden")));
    }

    #[test]
    fn long_keys_are_bounded_and_distinct() {
        let a = "é".repeat(256);
        let b = format!("{}x", "é".repeat(255));
        let (na, nb) = (file_name(&a), file_name(&b));
        assert!(na.len() <= MAX_STEM + SUFFIX.len(), "{}", na.len());
        assert_ne!(na, nb);
        let stem = na.split('~').next().unwrap();
        assert!(stem.len() <= PREFIX && !stem.ends_with('%'));
        for s in ["x".repeat(512), "/".repeat(512)] {
            assert!(file_name(&s).len() < 255);
        }
    }
}
