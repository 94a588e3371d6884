//! Who we are: the metadata stored with a lease so that `status` can say who holds what.

use crate::backend::{now_ms, Holder};

/// The longest command line we store; status lines stay readable and keys stay small.
const MAX_COMMAND: usize = 256;

/// This process as a holder of a lease protecting `command`.
pub fn current(command: &[String]) -> Holder {
    Holder {
        host: hostname(),
        pid: std::process::id(),
        user: username(),
        command: shorten(&command.join(" "), MAX_COMMAND),
        acquired_at_ms: now_ms(),
        held_until_ms: None,
        value: None,
    }
}

impl Holder {
    /// How long it has held (or waited), in ms; `None` when the store does not know when it
    /// began (an application's lock, which records no time), rather than the whole epoch.
    pub fn held_for_ms(&self) -> Option<u64> {
        (self.acquired_at_ms > 0).then(|| now_ms().saturating_sub(self.acquired_at_ms))
    }

    /// [`Self::held_for_ms`] as `status` and the waiting line show it: `?` when unknown.
    pub fn held_for_text(&self) -> String {
        self.held_for_ms()
            .map_or("?".into(), crate::output::short_duration)
    }
}

/// This host's name, as leases record it.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The user name for our uid, read from `/etc/passwd` directly: going through NSS
/// (getpwuid) costs a dozen system calls on every run, a visible share of `exec`'s
/// overhead. Users known only to a directory service are shown by uid.
fn username() -> String {
    let uid = nix::unistd::getuid().as_raw();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| name_for_uid(&passwd, uid))
        .unwrap_or_else(|| uid.to_string())
}

/// The name of `uid` in passwd(5) text.
fn name_for_uid(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?.parse::<u32>().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_string())
    })
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_cut_on_char_boundaries() {
        let long = "é".repeat(300);
        let h = current(&[long]);
        assert!(h.command.len() <= MAX_COMMAND + "…".len());
        assert!(h.command.ends_with('…'));
    }

    #[test]
    fn user_names_come_from_passwd_lines() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\n# comment\nci:x:1001:1001::/home/ci:/bin/sh\n";
        assert_eq!(name_for_uid(passwd, 0).as_deref(), Some("root"));
        assert_eq!(name_for_uid(passwd, 1001).as_deref(), Some("ci"));
        assert_eq!(name_for_uid(passwd, 5), None);
    }
}
