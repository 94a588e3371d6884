//! The on-disk format of a key file.
//!
//! ```text
//! offset 0     slot 0  ┐ two copies of the record; the valid one with the higher
//! offset 4096  slot 1  ┘ sequence number is current; writes go to the other one
//! offset 8192  waiter list (informational: who waits, for `status`)
//! ```
//!
//! A slot is `"DLK1"`, body length (u32 LE), sequence number (u64 LE), FNV-1a checksum of
//! length + sequence + body (u64 LE), then the body: the [`State`] as JSON, so that `cat`
//! shows what is going on. A slot's sequence number has the parity of its index. The
//! waiter list is `"DLKQ"`, length, checksum, then a JSON [`Waiters`].

use serde::{Deserialize, Serialize};

use super::names::fnv1a;
use crate::backend::{Holder, Sharing};

/// The ticket of the waiter-list entry that marks the list incomplete (`queue.rs` lists
/// at most so many waiters for `status`).
pub(super) const UNLISTED: u64 = u64::MAX;

/// Size of one slot: a page, so that a write of one slot never spans two pages.
pub const SLOT: usize = 4096;
/// Both slots; a key file is never shorter than this.
pub const SLOTS_LEN: usize = 2 * SLOT;
/// Where the waiter list starts.
pub const WAITERS_AT: u64 = SLOTS_LEN as u64;
const HEADER: usize = 24;
const MAGIC: &[u8; 4] = b"DLK1";
const WAITERS_MAGIC: &[u8; 4] = b"DLKQ";
const WAITERS_HEADER: usize = 16;
/// A waiter list longer than this is treated as damaged.
pub const WAITERS_MAX: usize = 1 << 20;

/// Everything known about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The key itself (file names may be hashed, and `status` lists keys).
    pub key: String,
    /// The last fencing token handed out (0: none yet).
    pub counter: u64,
    /// A durable upper bound on every token handed out (see the module doc of `local`).
    pub ceiling: u64,
    /// The kernel boot this record was last written in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// The next ticket number (waiters and bound holders each take one).
    pub next_ticket: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseRecord>,
    /// The holders after the first (`lease`) of a key held shared or as a semaphore, in
    /// the order they were granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more: Vec<LeaseRecord>,
    /// How the holders hold the key (see [`Sharing`]).
    #[serde(default, skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    /// When a holder last left, making room (CLOCK_BOOTTIME ms): tells a stuck queue from a
    /// hand-off.
    #[serde(default)]
    pub freed_boot_ms: u64,
    /// A waiter that asked for `--priority` or `--supersede` may be queued: attempts then
    /// read the waiter list for the served order (`local/order.rs`) instead of taking the
    /// ticket order from the waiting locks alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ranked: bool,
}

impl State {
    /// A key that was never locked.
    pub fn new(key: &str, boot_id: &str) -> State {
        State {
            key: key.to_string(),
            counter: 0,
            ceiling: 0,
            boot_id: boot_id.to_string(),
            next_ticket: 0,
            lease: None,
            more: Vec::new(),
            sharing: Sharing::Exclusive,
            freed_boot_ms: 0,
            ranked: false,
        }
    }
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub owner: String,
    pub token: u64,
    pub depth: u32,
    /// Bound to a live process that holds the hold lock of `ticket`: the lease ends when
    /// that lock is released (or the process dies), and its TTL is not enforced.
    pub bound: bool,
    pub ticket: u64,
    pub ttl_ms: u64,
    /// Expiry in wall-clock ms (for display, and to carry the expiry across a reboot).
    pub expires_wall_ms: u64,
    /// Expiry in CLOCK_BOOTTIME ms of `State::boot_id` (immune to wall-clock steps).
    pub expires_boot_ms: u64,
    pub holder: Holder,
}

/// The waiter list (the queue itself is made of kernel locks): who waits, for `status`, and
/// the priorities and `--supersede` marks of the served order (`local/order.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiters {
    pub boot_id: String,
    pub entries: Vec<WaiterRecord>,
}

/// One waiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterRecord {
    pub ticket: u64,
    pub owner: String,
    pub holder: Holder,
    /// How it asks to hold the key: a shared or semaphore caller reads those ahead of it.
    #[serde(default, skip_serializing_if = "Sharing::is_exclusive")]
    pub sharing: Sharing,
    /// Its `--priority`: the served order is priority first, then ticket.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
    /// It asked for `--supersede`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub supersede: bool,
    /// The newer `--supersede` waiter that took its place: it is out of the line, and
    /// leaves (exit 80) when it next looks, which the write of this mark wakes it for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<Superseder>,
}

impl WaiterRecord {
    /// A waiter known only by its ticket (the list was full when it joined), or the
    /// [`UNLISTED`] mark itself: exclusive, priority 0, nobody shown.
    pub fn unlisted(ticket: u64) -> WaiterRecord {
        WaiterRecord {
            ticket,
            owner: String::new(),
            holder: Holder::default(),
            sharing: Sharing::default(),
            priority: 0,
            supersede: false,
            superseded_by: None,
        }
    }
}

/// Who superseded a waiter, for its one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superseder {
    pub host: String,
    pub pid: u32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// What a slot held.
#[derive(Debug)]
pub enum Slot {
    Valid { seq: u64, body: Vec<u8> },
    Invalid(String),
}

/// Encodes `state` as slot bytes (header + body, not padded); `None` when it does not fit.
pub fn encode_slot(seq: u64, state: &State) -> Option<Vec<u8>> {
    let body = serde_json::to_vec(state).ok()?;
    if HEADER + body.len() > SLOT {
        return None;
    }
    let len = (body.len() as u32).to_le_bytes();
    let seq_b = seq.to_le_bytes();
    let sum = fnv1a(&[&len, &seq_b, &body], 0);
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len);
    out.extend_from_slice(&seq_b);
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&body);
    Some(out)
}

/// Checks the slot at `index` (its `SLOT` bytes in `buf`).
pub fn decode_slot(index: usize, buf: &[u8]) -> Slot {
    if buf.len() < HEADER || &buf[..4] != MAGIC {
        return Slot::Invalid(format!("slot {index}: bad magic"));
    }
    let len = u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
    let seq = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    let sum = u64::from_le_bytes(buf[16..24].try_into().unwrap());
    if HEADER + len > buf.len() {
        return Slot::Invalid(format!("slot {index}: bad length {len}"));
    }
    let body = &buf[HEADER..HEADER + len];
    if fnv1a(&[&buf[4..8], &buf[8..16], body], 0) != sum {
        return Slot::Invalid(format!("slot {index}: bad checksum"));
    }
    if seq % 2 != index as u64 {
        return Slot::Invalid(format!("slot {index}: sequence {seq} in the wrong slot"));
    }
    Slot::Valid {
        seq,
        body: body.to_vec(),
    }
}

/// Parses a slot body.
pub fn parse_state(body: &[u8]) -> Result<State, String> {
    serde_json::from_slice(body).map_err(|e| format!("unreadable record: {e}"))
}

/// Encodes the waiter list.
pub fn encode_waiters(w: &Waiters) -> Vec<u8> {
    let body = serde_json::to_vec(w).unwrap_or_default();
    let len = (body.len() as u32).to_le_bytes();
    let sum = fnv1a(&[&len, &body], 0);
    let mut out = Vec::with_capacity(WAITERS_HEADER + body.len());
    out.extend_from_slice(WAITERS_MAGIC);
    out.extend_from_slice(&len);
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reads the header of a waiter list: the body length, or `None` when there is no valid
/// list (an empty header means the list was never written).
pub fn waiters_len(header: &[u8]) -> Option<usize> {
    if header.len() < WAITERS_HEADER || &header[..4] != WAITERS_MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
    (len <= WAITERS_MAX).then_some(len)
}

/// Size of the waiter list header.
pub const fn waiters_header_len() -> usize {
    WAITERS_HEADER
}

/// Checks and parses a waiter list (`header` then `body`).
pub fn decode_waiters(header: &[u8], body: &[u8]) -> Option<Waiters> {
    let sum = u64::from_le_bytes(header[8..16].try_into().ok()?);
    if fnv1a(&[&header[4..8], body], 0) != sum {
        return None;
    }
    serde_json::from_slice(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_detect_damage() {
        let st = State::new("k", "boot");
        let bytes = encode_slot(4, &st).unwrap();
        let mut slot = vec![0u8; SLOT];
        slot[..bytes.len()].copy_from_slice(&bytes);
        match decode_slot(0, &slot) {
            Slot::Valid { seq, body } => {
                assert_eq!(seq, 4);
                assert_eq!(parse_state(&body).unwrap(), st);
            }
            Slot::Invalid(e) => panic!("{e}"),
        }
        assert!(matches!(decode_slot(1, &slot), Slot::Invalid(_)), "parity");
        slot[HEADER + 3] ^= 1;
        assert!(matches!(decode_slot(0, &slot), Slot::Invalid(_)));
        assert!(matches!(decode_slot(0, &[0u8; 10]), Slot::Invalid(_)));
    }

    #[test]
    fn waiters_round_trip() {
        let w = Waiters {
            boot_id: "b".into(),
            entries: vec![WaiterRecord {
                ticket: 3,
                owner: "o".into(),
                holder: Holder::default(),
                sharing: Sharing::Shared,
                priority: -3,
                supersede: true,
                superseded_by: Some(Superseder {
                    host: "h".into(),
                    pid: 7,
                }),
            }],
        };
        let bytes = encode_waiters(&w);
        let (h, b) = bytes.split_at(waiters_header_len());
        assert_eq!(waiters_len(h), Some(b.len()));
        assert_eq!(decode_waiters(h, b), Some(w));
    }
}
