//! Times as output shows them. A file of its own below `output.rs` so that what
//! `events.rs` and the other output files need does not import all of output.

use std::time::{Duration, UNIX_EPOCH};

/// RFC 3339 (UTC, milliseconds) for a time in milliseconds since the epoch.
pub fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// `1h02m`, `5m03s`, `4.2s`, `350ms`: compact and readable.
pub fn short_duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}
