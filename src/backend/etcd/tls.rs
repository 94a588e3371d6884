//! TLS for `etcds://`: the CA, client certificate and key named by `DLOCK_TLS_CA`,
//! `DLOCK_TLS_CERT` and `DLOCK_TLS_KEY`, as for `rediss://` (rustls, no OpenSSL).

use std::path::PathBuf;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::env;
use crate::error::{Error, Result};

/// The TLS settings of an `etcds://` connection to `host`: the system's roots, plus the CA
/// of `DLOCK_TLS_CA` when set; a client certificate when `DLOCK_TLS_CERT` and
/// `DLOCK_TLS_KEY` are (both or neither).
pub fn from_env(host: &str) -> Result<ClientTlsConfig> {
    let path = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let read = |var: &str, path: &PathBuf| {
        std::fs::read(path)
            .map_err(|e| Error::Usage(format!("cannot read {var} file {}: {e}", path.display())))
    };
    let domain = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let domain = domain.trim_start_matches('[').trim_end_matches(']');
    let mut tls = ClientTlsConfig::new()
        .with_native_roots()
        .domain_name(domain);
    if let Some(ca) = path(env::TLS_CA) {
        tls = tls.ca_certificate(Certificate::from_pem(read(env::TLS_CA, &ca)?));
    }
    match (path(env::TLS_CERT), path(env::TLS_KEY)) {
        (Some(cert), Some(key)) => {
            let cert = read(env::TLS_CERT, &cert)?;
            let key = read(env::TLS_KEY, &key)?;
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        (None, None) => {}
        _ => {
            return Err(Error::Usage(format!(
                "{} and {} go together: set both for a client certificate, or neither",
                env::TLS_CERT,
                env::TLS_KEY
            )))
        }
    }
    Ok(tls)
}
