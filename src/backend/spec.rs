//! Which backend the command line names: the URLs of `--url`/`DLOCK_URL`, joined and
//! checked against the scheme table before anything is opened.

use std::path::PathBuf;
use std::sync::Arc;

use super::local::LocalBackend;
use super::registry;
use super::url::redact as redact_url;
use super::{install_crypto_provider, Backend};
use crate::config::default_dir;
use crate::error::{Error, Result};

/// Which backend to talk to, decided from `--url`/`DLOCK_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSpec {
    /// The embedded local store in this directory (no URL given).
    Local(PathBuf),
    /// One store, named by a URL of a scheme in [`crate::backend::registry`].
    One(String),
    /// Several stores of one family: a majority quorum (Redlock over Redis servers).
    Quorum(Vec<String>),
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
        for url in &joined {
            (registry::scheme_of(url)?.check)(url)?;
        }
        match joined.as_slice() {
            // An empty value is a mistake (a CI secret that is not set), never a request
            // for the local store: that would turn cross-host exclusion off without a word.
            [] if !urls.is_empty() => Err(Error::Usage(
                "the backend URL is empty: give one, or leave --url and DLOCK_URL out (or use file://DIR) for the local store".into(),
            )),
            [] => Ok(BackendSpec::Local(default_dir())),
            [one] => Ok(BackendSpec::One(one.clone())),
            many => {
                let (name, _) = registry::quorum_of(many)?;
                for (i, u) in many.iter().enumerate() {
                    if many[..i].contains(u) {
                        return Err(Error::Usage(format!(
                            "{} is given twice: a {name} quorum needs independent servers",
                            redact_url(u)
                        )));
                    }
                }
                Ok(BackendSpec::Quorum(many.to_vec()))
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
        BackendSpec::One(url) => {
            install_crypto_provider();
            (registry::scheme_of(url)?.open)(url, exclusive).await
        }
        BackendSpec::Quorum(urls) => {
            install_crypto_provider();
            (registry::quorum_of(urls)?.1)(urls).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let one = vec!["redis://a".to_string()];
        assert_eq!(
            BackendSpec::from_urls(&one).unwrap(),
            BackendSpec::One("redis://a".into())
        );
        let many = vec!["redis://a,redis://b".to_string(), "redis://c".to_string()];
        assert!(
            matches!(BackendSpec::from_urls(&many).unwrap(), BackendSpec::Quorum(v) if v.len() == 3)
        );
        let unix = vec!["redis+unix:///run/redis.sock?db=2".to_string()];
        assert_eq!(
            BackendSpec::from_urls(&unix).unwrap(),
            BackendSpec::One("redis+unix:///run/redis.sock?db=2".into())
        );
        let file = vec!["file:///tmp/x".to_string()];
        assert_eq!(
            BackendSpec::from_urls(&file).unwrap(),
            BackendSpec::One("file:///tmp/x".into())
        );
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
        let split: Vec<String> = ["redis+sentinel://:pw@s1:26379", "s2:26379/mymaster"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            BackendSpec::from_urls(&split).unwrap(),
            BackendSpec::One("redis+sentinel://:pw@s1:26379,s2:26379/mymaster".into())
        );
        // Two Sentinel-managed masters (and a plain server) make a Redlock quorum.
        let quorum = vec![
            "redis+sentinel://s1,s2/a,redis+sentinel://s1,s2/b".to_string(),
            "redis://c".to_string(),
        ];
        match BackendSpec::from_urls(&quorum).unwrap() {
            BackendSpec::Quorum(urls) => assert_eq!(
                urls,
                [
                    "redis+sentinel://s1,s2/a",
                    "redis+sentinel://s1,s2/b",
                    "redis://c"
                ]
            ),
            other => panic!("{other:?}"),
        }
        assert!(BackendSpec::from_urls(&["redis+sentinel://s1:1".to_string()]).is_err());
        // Nothing is appended to a Sentinel URL that has its master name already.
        let e = BackendSpec::from_urls(&["redis+sentinel://s1/m,junk".to_string()]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        // A comma in a password is put back, wherever `--url` split it.
        for pieces in [
            &["redis://u:Pa,S s@h:1,redis://h:2"][..],
            &["redis://u:Pa", "S s@h:1", "redis://h:2"],
        ] {
            let pieces: Vec<String> = pieces.iter().map(|p| p.to_string()).collect();
            assert_eq!(
                BackendSpec::from_urls(&pieces).unwrap(),
                BackendSpec::Quorum(vec!["redis://u:Pa,S s@h:1".into(), "redis://h:2".into()])
            );
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
}
