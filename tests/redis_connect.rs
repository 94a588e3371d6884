//! Connecting to Redis through the library: a refused connection, passwords (wrong,
//! missing, from `REDISCLI_AUTH` or the environment), TLS, a paused server, a restart.

use std::time::{Duration, Instant};

use crate::redis_backend::{connect, connect_fast, take};
use crate::support::{self, no_wait, req, self_signed, RedisServer};
use dlock::backend::redis::{connection_info, RedisBackend};
use dlock::backend::{Backend, ReleaseMode};

#[tokio::test]
async fn refused_connection_is_unavailable_in_one_line() {
    let port = support::free_port();
    let url = format!("redis://:topsecret@127.0.0.1:{port}");
    let t0 = Instant::now();
    let e = RedisBackend::connect(&url)
        .await
        .err()
        .expect("nobody listens");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert_eq!(e.exit_code(), 69);
    let msg = e.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert!(!msg.contains("topsecret") && !msg.contains('\n'), "{msg}");
}

#[tokio::test]
async fn wrong_or_missing_password_is_unavailable() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let bad = format!("redis://:hunter2pw@127.0.0.1:{}", server.port);
    let e = RedisBackend::connect(&bad)
        .await
        .err()
        .expect("wrong password");
    let msg = e.to_string();
    assert_eq!(e.exit_code(), 69, "{msg}");
    assert!(!msg.contains("hunter2pw") && !msg.contains('\n'), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{}", server.port)), "{msg}");

    // Without a password the handshake sends nothing, so the refusal comes with the first
    // request (NOAUTH) rather than at connect: either way, exit 69.
    let e = match RedisBackend::connect(&server.url()).await {
        Err(e) => e,
        Ok(b) => b
            .acquire(&req("auth", "o"), &no_wait())
            .await
            .expect_err("no password"),
    };
    assert_eq!(e.exit_code(), 69, "{e}");
    assert!(!e.to_string().contains('\n'), "{e}");

    let good = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let b = RedisBackend::connect(&good).await.unwrap();
    assert!(!b.describe().contains("s3cret"));
    b.acquire(&req("auth", "o"), &no_wait()).await.unwrap();
}

#[test]
fn rediscli_auth_fills_in_a_missing_password() {
    let info = connection_info("redis://127.0.0.1:6390/2", Some("fromenv".into())).unwrap();
    assert_eq!(info.redis_settings().password(), Some("fromenv"));
    assert_eq!(info.redis_settings().db(), 2);
    let info = connection_info("redis://u:inurl@h:1", Some("fromenv".into())).unwrap();
    assert_eq!(info.redis_settings().password(), Some("inurl"));
    assert_eq!(info.redis_settings().username(), Some("u"));
    let info = connection_info("redis://h", None).unwrap();
    assert_eq!(info.redis_settings().password(), None);
    let e = connection_info("redis://:pw@h:notaport", None).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(!e.to_string().contains(":pw@"), "{e}");
}

#[tokio::test]
async fn env_password_authenticates() {
    // Through the URL builder, not the process environment (tests run in parallel).
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let info = connection_info(&server.url(), Some("s3cret".into())).unwrap();
    let client = redis::Client::open(info).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn tls_urls_attempt_a_handshake() {
    // A plain server cannot speak TLS: the handshake fails, fast, as Unavailable (and the
    // crypto provider is in place, or rustls would panic).
    let server = RedisServer::start();
    let url = format!("rediss://:pw@127.0.0.1:{}", server.port);
    let t0 = Instant::now();
    let e = RedisBackend::connect(&url)
        .await
        .err()
        .expect("no TLS there");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert_eq!(e.exit_code(), 69, "{e}");
    assert!(!e.to_string().contains(":pw@"), "{e}");
}

#[tokio::test]
async fn a_paused_server_times_out_instead_of_hanging() {
    let server = RedisServer::start();
    let b = connect_fast(&server).await;
    take(&b, "frozen", "o").await;
    server.pause();
    let t0 = Instant::now();
    let e = b
        .renew("frozen", "o", Duration::from_secs(10))
        .await
        .unwrap_err();
    let elapsed = t0.elapsed();
    // A waiter rides a silent server out for the time it allows (`-n`: briefly).
    let e2 = b.acquire(&req("other", "o"), &no_wait()).await.err();
    server.resume();
    assert_eq!(e.exit_code(), 69);
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(elapsed < Duration::from_millis(1_500), "{elapsed:?}");
    assert_eq!(e2.map(|e| e.exit_code()), Some(69));
    b.renew("frozen", "o", Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test]
async fn reconnects_after_a_server_restart() {
    let mut server = RedisServer::start();
    let b = connect(&server).await;
    take(&b, "phoenix", "o1").await;
    server.restart();
    // The first call may find the old connection broken; a later one must work.
    let mut last = None;
    for _ in 0..3 {
        match b.acquire(&req("phoenix", "o2"), &no_wait()).await {
            Ok(got) => {
                last = Some(got.lease.owner);
                break;
            }
            Err(e) => assert_eq!(e.exit_code(), 69, "{e}"),
        }
    }
    assert_eq!(last.as_deref(), Some("o2"));
}

#[tokio::test]
async fn locks_work_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let Some((cert, key)) = self_signed(dir.path()) else {
        panic!("openssl is needed to make the test certificates (apt-get install openssl)");
    };
    let tls_port = support::free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-auth-clients",
        "no",
    ]);
    // `#insecure`: the certificate is self-signed; the connection is still TLS.
    let url = format!("rediss://127.0.0.1:{tls_port}/#insecure");
    let b = RedisBackend::connect(&url).await.expect("TLS connect");
    assert_eq!(take(&b, "secure", "o").await.lease.owner, "o");
    assert_eq!(server.cli(&["HGET", "dlock:{secure}:lease", "owner"]), "o");
    b.release("secure", "o", ReleaseMode::All).await.unwrap();
}
