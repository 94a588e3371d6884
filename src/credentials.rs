//! Keeping backend passwords out of the command's environment, while nested `dlock` calls
//! inside it still reach the same store.
//!
//! `exec` gives its command `DLOCK_URL` with every password removed. When the URLs carried
//! one, the full URLs go into a sealed, unlinked in-memory file (`memfd`) that the command
//! inherits as an open file descriptor, whose number is in [`crate::env::URL_FD`]. A nested
//! `dlock` reads it back and uses, for each URL it was given without a password, the full
//! URL that strips down to exactly that one ([`restore`]). So a password only ever goes
//! to the server it was given for: a command that points `DLOCK_URL` elsewhere gets none.
//!
//! The file is as readable as the environment was to the command's own processes (through
//! the descriptor), but it is not in `env` output, `/proc/PID/environ`, crash reports or
//! CI logs of the environment. A program between that closes inherited descriptors (`sudo`,
//! some daemons) leaves the nested call without the password: the server then says that
//! authentication is required.

use std::ffi::CStr;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};

use crate::error::{Error, Result};

/// The memfd's name, as `/proc/self/fd/N` shows it (`/memfd:dlock-url (deleted)`): a
/// descriptor under that number that is anything else is not read.
const NAME: &CStr = c"dlock-url";

/// What `exec` passes its command for the backend.
pub struct ForChild {
    /// `DLOCK_URL` without passwords.
    pub url: String,
    /// The descriptor with the full URLs, when they carried a password; it must stay open
    /// until the command is spawned.
    pub fd: Option<OwnedFd>,
}

impl ForChild {
    /// The variables to set in the command's environment.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(crate::env::URL, self.url.clone())];
        if let Some(fd) = &self.fd {
            env.push((crate::env::URL_FD, fd.as_raw_fd().to_string()));
        }
        env
    }
}

/// Prepares `urls` (as given, possibly with passwords) for the command.
pub fn for_child(urls: &[String]) -> Result<ForChild> {
    let urls = crate::backend::spec::join_urls(urls);
    let url = urls.iter().map(|u| strip(u)).collect::<Vec<_>>().join(",");
    if url == urls.join(",") {
        return Ok(ForChild { url, fd: None });
    }
    let fd = memfd_with(&urls).map_err(|e| {
        Error::Internal(format!(
            "cannot pass the backend password to the command: {e}"
        ))
    })?;
    Ok(ForChild { url, fd: Some(fd) })
}

/// A sealed memfd holding `urls` as JSON, inherited across `exec` (no close-on-exec).
fn memfd_with(urls: &[String]) -> std::io::Result<OwnedFd> {
    let fd = memfd_create(NAME, MemFdCreateFlag::MFD_ALLOW_SEALING)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(serde_json::to_string(urls)?.as_bytes())?;
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_SEAL;
    fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))?;
    Ok(file.into())
}

/// `urls` (as `--url` splits them: joined again, see [`crate::backend::spec::join_urls`]) with
/// each URL that has no password replaced by the inherited full URL (see the module
/// documentation) that strips down to it. Without an inherited descriptor, or when it
/// cannot be read, the joined `urls` as they are.
pub fn restore(urls: Vec<String>) -> Vec<String> {
    let Some(full) = inherited() else {
        return crate::backend::spec::join_urls(&urls);
    };
    restore_from(urls, &full)
}

/// [`restore`] with the inherited URLs given.
pub fn restore_from(urls: Vec<String>, full: &[String]) -> Vec<String> {
    crate::backend::spec::join_urls(&urls)
        .into_iter()
        .map(|url| {
            full.iter()
                .find(|f| *f != &url && strip(f) == url)
                .cloned()
                .unwrap_or(url)
        })
        .collect()
}

/// The URLs in the descriptor [`crate::env::URL_FD`] names, if it is ours.
fn inherited() -> Option<Vec<String>> {
    let n: u32 = std::env::var(crate::env::URL_FD)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let path = format!("/proc/self/fd/{n}");
    let target = std::fs::read_link(&path).ok()?;
    let expected = format!("/memfd:{}", NAME.to_str().ok()?);
    if !target.to_string_lossy().starts_with(&expected) {
        return None;
    }
    serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()
}

/// `url` without its password: see [`crate::backend::url::strip_password`]. A lone
/// `user@` is a user name (the password then comes from `REDISCLI_AUTH`) and stays.
pub fn strip(url: &str) -> String {
    crate::backend::url::strip_password(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_stripped() {
        let cases = [
            ("redis://:secret@h:6379/0", "redis://h:6379/0"),
            ("redis://u:secret@h", "redis://u@h"),
            ("redis://u@h", "redis://u@h"),
            ("redis://h:1", "redis://h:1"),
            ("rediss://u:p@ss@h/1#insecure", "rediss://u@h/1#insecure"),
            (
                "redis+unix:///run/r.sock?db=1&pass=secret&user=u",
                "redis+unix:///run/r.sock?db=1&user=u",
            ),
            ("redis+unix:///r.sock?pass=a@b", "redis+unix:///r.sock"),
            (
                "redis+sentinel://app:pw@s1:26379,s2/m",
                "redis+sentinel://app@s1:26379,s2/m",
            ),
            ("s2:26379/mymaster", "s2:26379/mymaster"),
            ("file:///tmp/x", "file:///tmp/x"),
        ];
        for (url, stripped) in cases {
            assert_eq!(strip(url), stripped, "{url}");
        }
    }

    #[test]
    fn a_comma_or_slash_in_a_password_never_reaches_the_child() {
        let given = ["redis://u:Pa", "S/s@h:1", "redis://:Xy/z@h:2"].map(String::from);
        let child = for_child(&given).unwrap();
        assert_eq!(child.url, "redis://u@h:1,redis://h:2");
        assert!(child.fd.is_some());
    }

    #[test]
    fn only_urls_that_strip_down_to_the_given_one_get_a_password() {
        let full = vec![
            "redis://:a@h1:1".to_string(),
            "redis://u:b@h2:2".to_string(),
        ];
        let given = vec![
            "redis://h1:1".to_string(),
            "redis://u@h2:2".to_string(),
            "redis://elsewhere:1".to_string(),
            "redis://:own@h1:1".to_string(),
        ];
        assert_eq!(
            restore_from(given, &full),
            [
                "redis://:a@h1:1",
                "redis://u:b@h2:2",
                "redis://elsewhere:1",
                "redis://:own@h1:1"
            ]
        );
    }
}
