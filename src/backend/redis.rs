//! The Redis backend (stub; being written).

use std::time::Duration;

use async_trait::async_trait;

use super::{
    AcquireRequest, Acquired, Backend, KeyStatus, Lease, ReleaseMode, Released, WaitOptions,
};
use crate::error::{Error, Result};

/// Locks kept in one Redis server.
pub struct RedisBackend {
    url: String,
}

impl RedisBackend {
    /// Connects to the server at `url`.
    pub async fn connect(url: &str) -> Result<RedisBackend> {
        Ok(RedisBackend {
            url: crate::config::redact_url(url),
        })
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn describe(&self) -> String {
        self.url.clone()
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
