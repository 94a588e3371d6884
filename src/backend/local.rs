//! The embedded local store (stub; being written).

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;

use super::{
    AcquireRequest, Acquired, Backend, KeyStatus, Lease, ReleaseMode, Released, WaitOptions,
};
use crate::error::{Error, Result};

/// Locks kept in a directory on this host.
pub struct LocalBackend {
    dir: PathBuf,
}

impl LocalBackend {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<LocalBackend> {
        Ok(LocalBackend {
            dir: dir.to_path_buf(),
        })
    }
}

#[async_trait]
impl Backend for LocalBackend {
    fn describe(&self) -> String {
        format!("file://{}", self.dir.display())
    }
    async fn acquire(&self, _req: &AcquireRequest, _wait: &WaitOptions) -> Result<Acquired> {
        Err(Error::Internal("not yet".into()))
    }
    async fn renew(&self, _key: &str, _owner: &str, _ttl: Duration) -> Result<Lease> {
        Err(Error::Internal("not yet".into()))
    }
    async fn release(&self, _key: &str, _owner: &str, _mode: ReleaseMode) -> Result<Released> {
        Err(Error::Internal("not yet".into()))
    }
    async fn status(&self, _keys: &[String]) -> Result<Vec<KeyStatus>> {
        Err(Error::Internal("not yet".into()))
    }
}
