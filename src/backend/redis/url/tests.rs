use super::*;

fn sentinel(url: &str) -> Result<SentinelTarget> {
    match parse(url, None)?.kind {
        Kind::Sentinel(s) => Ok(s),
        other => panic!("{url}: {other:?}"),
    }
}

fn cluster(url: &str, env: Option<&str>) -> Result<Vec<ConnectionInfo>> {
    match parse(url, env.map(String::from))?.kind {
        Kind::Cluster(nodes) => Ok(nodes),
        other => panic!("{url}: {other:?}"),
    }
}

#[test]
fn sentinel_urls() {
    let u = sentinel("redis+sentinel://:p%40ss@s1:26380,s2,[::1]:5/mymaster/2").unwrap();
    assert!(!u.tls && !u.insecure);
    assert_eq!(
        u.nodes,
        vec![
            ("s1".to_string(), 26380),
            ("s2".to_string(), SENTINEL_PORT),
            ("::1".to_string(), 5)
        ]
    );
    assert_eq!(u.service, "mymaster");
    assert_eq!(u.db, 2);
    assert_eq!(u.username, None);
    assert_eq!(u.password.as_deref(), Some("p@ss"));

    let u = sentinel("rediss+sentinel://app:pw@s1/m#insecure").unwrap();
    assert!(u.tls && u.insecure);
    assert_eq!(u.username.as_deref(), Some("app"));
    assert_eq!(u.db, 0);

    for bad in [
        "redis+sentinel://s1:26379",
        "redis+sentinel://s1:26379/",
        "redis+sentinel:///m",
        "redis+sentinel://s1:port/m",
        "redis+sentinel://s1/m/notadb",
        "redis+sentinel://s1/m/1/x",
        "redis+sentinel://s1/m,junk",
    ] {
        let e = parse(bad, None).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        assert!(e.to_string().contains("invalid Sentinel URL"), "{e}");
    }
    let e = parse("redis+sentinel://:secret@s1:x/m", None).unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[test]
fn cluster_urls() {
    let nodes = cluster("redis+cluster://:pw@a:7000,b,[::1]:7002", None).unwrap();
    assert_eq!(nodes.len(), 3);
    assert_eq!(nodes[0].redis_settings().password(), Some("pw"));
    assert!(matches!(nodes[1].addr(), ConnectionAddr::Tcp(h, 6379) if h == "b"));
    let nodes = cluster("rediss+cluster://a:1#insecure", Some("env")).unwrap();
    assert!(matches!(
        nodes[0].addr(),
        ConnectionAddr::TcpTls { insecure: true, .. }
    ));
    assert_eq!(nodes[0].redis_settings().password(), Some("env"));
    for bad in [
        "redis+cluster://",
        "redis+cluster://a:x",
        "redis+cluster://a:1/2",
    ] {
        let e = parse(bad, None).expect_err("refused").to_string();
        assert!(e.contains("invalid Cluster URL"), "{bad}: {e}");
    }
    let e = parse("redis+cluster://:secret@a:x", None).expect_err("refused");
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[test]
fn direct_and_unix_urls() {
    let info = connection_info("redis://u:pa/ss?#@x@h:1/2", None).unwrap();
    assert_eq!(info.redis_settings().password(), Some("pa/ss?#@x"));
    assert_eq!(info.redis_settings().username(), Some("u"));
    assert_eq!(info.redis_settings().db(), 2);
    assert!(matches!(info.addr(), ConnectionAddr::Tcp(h, 1) if h == "h"));
    let info = connection_info("rediss://h/#insecure", None).unwrap();
    assert!(matches!(
        info.addr(),
        ConnectionAddr::TcpTls {
            insecure: true,
            port: 6379,
            ..
        }
    ));
    let info =
        connection_info("redis+unix:///run/r%20s.sock?db=3&user=u&pass=a%26b", None).unwrap();
    assert!(matches!(info.addr(), ConnectionAddr::Unix(p) if p.to_str() == Some("/run/r s.sock")));
    assert_eq!(info.redis_settings().db(), 3);
    assert_eq!(info.redis_settings().password(), Some("a&b"));
    let info = connection_info("unix:///r.sock", Some("env".into())).unwrap();
    assert_eq!(info.redis_settings().password(), Some("env"));
    for bad in [
        "redis://a,b:1",
        "redis://0.0.0.0",
        "redis://h/x",
        "redis://h/1/2",
        "rediss://h#other",
        "redis+unix://h/r.sock",
        "redis+unix:///",
        "redis://h?protocol=9",
    ] {
        assert_eq!(
            connection_info(bad, None).unwrap_err().exit_code(),
            2,
            "{bad}"
        );
    }
}

#[test]
fn unknown_parameters_are_refused_on_every_scheme() {
    for base in [
        "redis://h:1/0",
        "rediss://h:1",
        "redis+unix:///r.sock",
        "redis+sentinel://s1/m",
        "rediss+sentinel://s1/m",
        "redis+cluster://a:1",
        "rediss+cluster://a:1",
    ] {
        for param in ["min_replica=1", "bogus=1"] {
            let url = format!("{base}?{param}");
            let e = parse(&url, None).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{url}");
            let text = e.to_string();
            let name = param.split('=').next().unwrap();
            assert!(
                text.contains(&format!("unknown parameter '{name}'"))
                    && text.contains("min_replicas, min_replicas_timeout"),
                "{url}: {text}"
            );
        }
        let url = format!("{base}?min_replicas=1&min_replicas=2");
        assert_eq!(parse(&url, None).unwrap_err().exit_code(), 2, "{url}");
        let url = format!("{base}?min_replicas=1");
        assert!(parse(&url, None).unwrap().min_replicas.is_some(), "{url}");
    }
}

#[test]
fn layout_plain_is_read_on_every_scheme_and_nothing_else_is() {
    for base in [
        "redis://h:1/0",
        "redis+unix:///r.sock",
        "redis+sentinel://s1/m",
        "redis+cluster://a:1",
    ] {
        let plain = parse(&format!("{base}?layout=plain"), None).unwrap();
        assert_eq!(plain.layout, Layout::Plain, "{base}");
        assert_eq!(parse(base, None).unwrap().layout, Layout::Dlock, "{base}");
        for bad in ["layout=PLAIN", "layout=", "layout=plain&min_replicas=1"] {
            let e = parse(&format!("{base}?{bad}"), None).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{base}?{bad}");
        }
    }
}
