//! TLS for `zks://`: the server's certificate checked against the CA of `DLOCK_TLS_CA`, or
//! the system's roots; a client certificate from `DLOCK_TLS_CERT` and `DLOCK_TLS_KEY` (both
//! or neither), as for `etcds://` and `rediss://`. The client's rustls takes ring as its
//! provider ([`crate::backend::install_crypto_provider`]).

use std::path::PathBuf;

use base64::Engine;
use zookeeper_client::TlsOptions;

use crate::env;
use crate::error::{Error, Result};

/// The TLS settings the environment names.
pub fn from_env() -> Result<TlsOptions> {
    crate::backend::install_crypto_provider();
    let ca = match path(env::TLS_CA) {
        Some(ca) => read(env::TLS_CA, &ca)?,
        None => system_roots(),
    };
    let options = TlsOptions::new()
        .with_pem_ca(&ca)
        .map_err(|e| bad(env::TLS_CA, e))?;
    match (path(env::TLS_CERT), path(env::TLS_KEY)) {
        (Some(cert), Some(key)) => {
            let (cert, key) = (read(env::TLS_CERT, &cert)?, read(env::TLS_KEY, &key)?);
            options
                .with_pem_identity(&cert, &key)
                .map_err(|e| bad(&format!("{}/{}", env::TLS_CERT, env::TLS_KEY), e))
        }
        (None, None) => Ok(options),
        _ => Err(Error::Usage(format!(
            "{} and {} go together: set both for a client certificate, or neither",
            env::TLS_CERT,
            env::TLS_KEY
        ))),
    }
}

fn path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn read(var: &str, path: &PathBuf) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("cannot read {var} file {}: {e}", path.display())))
}

fn bad(var: &str, e: zookeeper_client::Error) -> Error {
    Error::Usage(format!("bad {var} file: {e}"))
}

/// The system's trusted roots as PEM, the only form the client takes.
fn system_roots() -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut pem = String::new();
    for cert in rustls_native_certs::load_native_certs().certs {
        let text = engine.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in text.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}
