//! Certificates for TLS tests, made with the `openssl` command (`None` without it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A private CA, a server certificate for 127.0.0.1 and a client certificate, all signed
/// by it, in `dir`; `None` without openssl.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

pub fn pki(dir: &Path) -> Option<Pki> {
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").ok()?;
    // An extension makes it an X.509 v3 certificate: rustls refuses v1.
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").ok()?;
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let sign = "x509 -req -CA ca.pem -CAkey ca.key -CAcreateserial -days 1";
    let steps = [
        format!("req -x509 {key} -days 1 -subj /CN=dlock-test-CA -keyout ca.key -out ca.pem"),
        format!("req {key} -subj /CN=127.0.0.1 -keyout server.key -out server.csr"),
        format!("{sign} -in server.csr -extfile san.ext -out server.pem"),
        format!("req {key} -subj /CN=dlock-client -keyout client.key -out client.csr"),
        format!("{sign} -in client.csr -extfile client.ext -out client.pem"),
    ];
    for step in steps {
        let ok = Command::new("openssl")
            .current_dir(dir)
            .args(step.split_whitespace())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return None;
        }
    }
    Some(Pki {
        ca: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    })
}

/// A self-signed certificate and key for 127.0.0.1 in `dir`, or `None` without openssl.
pub fn self_signed(dir: &std::path::Path) -> Option<(String, String)> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    made.success().then(|| {
        let s = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
        (s(cert), s(key))
    })
}
