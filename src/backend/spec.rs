//! Which backend the command line names: the URLs of `--url`/`DLOCK_URL`, joined and
//! read into typed targets by the scheme table before anything is opened; opening uses
//! those targets, not the URLs again.

use std::path::PathBuf;
use std::sync::Arc;

use super::local::LocalBackend;
use super::registry;
use super::target::{self, Target};
use super::{install_crypto_provider, Backend};
use crate::config::default_dir;
use crate::error::{Error, Result};

/// Which backend to talk to, decided from `--url`/`DLOCK_URL`. Its URLs are shown
/// (`Debug`) only redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSpec {
    /// The embedded local store in this directory (no URL given).
    Local(PathBuf),
    /// One store, named by a URL of a scheme in [`crate::backend::registry`].
    One(Target),
    /// Several stores of one family: a majority quorum (Redlock over Redis servers).
    Quorum(Vec<Target>),
}

/// The URLs in `urls`, which `--url` and `DLOCK_URL` split at every comma. A piece that
/// does not start with a known scheme continues the URL before it, comma and all: one more
/// host of a cluster (`redis+sentinel://h1:26379,h2:26379/mymaster`), or a comma inside a
/// password or a parameter, so that no piece of a password is ever read as a URL of its
/// own. Blanks around each URL are trimmed.
pub fn join_urls(urls: &[String]) -> Vec<String> {
    let mut joined: Vec<String> = Vec::new();
    for piece in urls.iter().flat_map(|u| u.split(',')) {
        match joined.last_mut() {
            Some(last) if registry::find(piece.trim_start()).is_none() => {
                last.push(',');
                last.push_str(piece);
            }
            _ => joined.push(piece.to_string()),
        }
    }
    joined.iter().map(|u| u.trim().to_string()).collect()
}

/// True for a URL that is only commas and blanks.
fn blank(url: &str) -> bool {
    url.trim_matches([',', ' ']).is_empty()
}

impl BackendSpec {
    /// Reads the URLs given on the command line (each may hold a comma-separated list;
    /// see [`join_urls`]).
    pub fn from_urls(urls: &[String]) -> Result<BackendSpec> {
        let joined: Vec<String> = join_urls(urls).into_iter().filter(|u| !blank(u)).collect();
        let mut targets = joined
            .iter()
            .map(|u| registry::read(u))
            .collect::<Result<Vec<Target>>>()?;
        match targets.len() {
            // An empty value is a mistake (a CI secret that is not set), never a request
            // for the local store: that would turn cross-host exclusion off without a word.
            0 if !urls.is_empty() => Err(Error::Usage(
                "the backend URL is empty: give one, or leave --url and DLOCK_URL out (or use file://DIR) for the local store".into(),
            )),
            0 => Ok(BackendSpec::Local(default_dir())),
            1 => Ok(BackendSpec::One(targets.remove(0))),
            _ => {
                let name = registry::quorum_of(&targets)?;
                for (i, t) in targets.iter().enumerate() {
                    if targets[..i].contains(t) {
                        return Err(Error::Usage(format!(
                            "{} is given twice: a {name} quorum needs independent servers",
                            t.shown()
                        )));
                    }
                }
                Ok(BackendSpec::Quorum(targets))
            }
        }
    }
}

/// Opens the backend a spec names. Connecting may fail with `Unavailable`.
pub async fn open(spec: &BackendSpec) -> Result<Arc<dyn Backend>> {
    open_with(spec, false).await
}

/// [`open`] for a caller that makes one request at a time (the CLI), which lets a Redis
/// waiter sleep on the one connection it has (see [`super::redis::Tuning::exclusive`]).
pub async fn open_exclusive(spec: &BackendSpec) -> Result<Arc<dyn Backend>> {
    open_with(spec, true).await
}

async fn open_with(spec: &BackendSpec, exclusive: bool) -> Result<Arc<dyn Backend>> {
    match spec {
        BackendSpec::Local(dir) => Ok(Arc::new(LocalBackend::open(dir)?)),
        BackendSpec::One(target) => {
            install_crypto_provider();
            target.open(exclusive).await
        }
        BackendSpec::Quorum(targets) => {
            install_crypto_provider();
            target::open_quorum(targets).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The URLs (as given) of the spec `given` reads to.
    fn named(given: &[&str]) -> Vec<String> {
        let given: Vec<String> = given.iter().map(|g| g.to_string()).collect();
        match BackendSpec::from_urls(&given).unwrap() {
            BackendSpec::Local(_) => vec![],
            BackendSpec::One(t) => vec![t.url().to_string()],
            BackendSpec::Quorum(ts) => ts.iter().map(|t| t.url().to_string()).collect(),
        }
    }

    #[test]
    fn specs() {
        let one = vec!["redis://a".to_string()];
        assert!(matches!(
            BackendSpec::from_urls(&one).unwrap(),
            BackendSpec::One(t) if t.url() == "redis://a"
        ));
        let many = vec!["redis://a,redis://b".to_string(), "redis://c".to_string()];
        assert!(
            matches!(BackendSpec::from_urls(&many).unwrap(), BackendSpec::Quorum(v) if v.len() == 3)
        );
        let unix = "redis+unix:///run/redis.sock?db=2";
        assert_eq!(named(&[unix]), [unix]);
        assert_eq!(named(&["file:///tmp/x"]), ["file:///tmp/x"]);
        assert!(BackendSpec::from_urls(&["consul://x".to_string()]).is_err());
        for empty in ["", " ", ",", " , "] {
            let e = BackendSpec::from_urls(&[empty.to_string()]).unwrap_err();
            assert!(e.to_string().contains("URL is empty"), "{e}");
        }
        assert_eq!(
            BackendSpec::from_urls(&[]).unwrap(),
            BackendSpec::Local(default_dir())
        );
        // The same server twice is not a quorum of independent servers.
        let twice = vec![
            "redis://a:1,redis://b:1".to_string(),
            "redis://a:1".to_string(),
        ];
        assert!(BackendSpec::from_urls(&twice).is_err());
        // Redlock members must all be Redis.
        let mixed = vec!["redis://a".to_string(), "file:///tmp/x".to_string()];
        assert!(BackendSpec::from_urls(&mixed).is_err());
    }

    #[test]
    fn sentinel_specs() {
        // Clap and DLOCK_URL split on commas: the host list is put back together.
        assert_eq!(
            named(&["redis+sentinel://:pw@s1:26379", "s2:26379/mymaster"]),
            ["redis+sentinel://:pw@s1:26379,s2:26379/mymaster"]
        );
        // Two Sentinel-managed masters (and a plain server) make a Redlock quorum.
        assert_eq!(
            named(&[
                "redis+sentinel://s1,s2/a,redis+sentinel://s1,s2/b",
                "redis://c"
            ]),
            [
                "redis+sentinel://s1,s2/a",
                "redis+sentinel://s1,s2/b",
                "redis://c"
            ]
        );
        assert!(BackendSpec::from_urls(&["redis+sentinel://s1:1".to_string()]).is_err());
        // Nothing is appended to a Sentinel URL that has its master name already.
        let e = BackendSpec::from_urls(&["redis+sentinel://s1/m,junk".to_string()]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        // A comma in a password is put back, wherever `--url` split it.
        for pieces in [
            &["redis://u:Pa,S s@h:1,redis://h:2"][..],
            &["redis://u:Pa", "S s@h:1", "redis://h:2"],
        ] {
            assert_eq!(named(pieces), ["redis://u:Pa,S s@h:1", "redis://h:2"]);
        }
        let e = BackendSpec::from_urls(&["redis://u:Pa,Ss@h:x".to_string()]).unwrap_err();
        assert!(
            !e.to_string().contains("Pa") && !e.to_string().contains("Ss"),
            "{e}"
        );
        // A bare host after a plain redis:// URL is still an error.
        let e = BackendSpec::from_urls(&["redis://a,b:1".to_string()]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    /// Two ports nobody listens on: bound, then closed.
    fn closed_ports() -> (u16, u16) {
        let bind = || std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, b) = (bind(), bind());
        (
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        )
    }

    #[tokio::test]
    async fn a_url_is_read_once_by_checking_and_never_again_by_opening() {
        let (p, q) = closed_ports();
        let given = [
            (format!("redis://u:pw@127.0.0.1:{p}/1"), 1),
            (format!("redis+sentinel://127.0.0.1:{p}/m"), 1),
            (format!("redis+cluster://127.0.0.1:{p}"), 1),
            (format!("redis://127.0.0.1:{p},redis://127.0.0.1:{q}"), 2),
            (format!("etcd://127.0.0.1:{p}"), 1),
            (format!("zk://127.0.0.1:{p}/c"), 1),
            (format!("postgres://u:pw@127.0.0.1:{p}/db"), 1),
            (format!("mysql://u:pw@127.0.0.1:{p}/db"), 1),
            (format!("memcached://127.0.0.1:{p}"), 1),
            (
                format!("memcached://127.0.0.1:{p},memcached://127.0.0.1:{q}"),
                2,
            ),
        ];
        let reads = || crate::backend::url::READS.with(std::cell::Cell::get);
        for (url, n) in given {
            let store = registry::find(&url).expect("a known scheme").store;
            if !registry::built_stores().contains(&store) {
                continue;
            }
            let before = reads();
            let spec = BackendSpec::from_urls(std::slice::from_ref(&url)).unwrap();
            assert_eq!(reads() - before, n, "{url}: checking reads each URL once");
            // Whether it connects is not the point; a store that retries is cut short.
            let limit = std::time::Duration::from_secs(10);
            let _ = tokio::time::timeout(limit, open(&spec)).await;
            assert_eq!(reads() - before, n, "{url}: opening read a URL again");
        }
    }
}
