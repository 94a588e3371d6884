use super::*;

fn ok(url: &str) -> Url {
    parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
}

#[test]
fn the_credentials_end_at_the_last_at() {
    let u = ok("redis://u:pa/ss?#@x@h:1,[::1]:2,k/0?db=1#insecure");
    assert_eq!(u.scheme, "redis");
    assert_eq!(u.user.as_deref(), Some("u"));
    assert_eq!(u.password.as_deref(), Some("pa/ss?#@x"));
    let addrs: Vec<String> = u.hosts.iter().map(|h| h.addr(9)).collect();
    assert_eq!(addrs, ["h:1", "[::1]:2", "k:9"]);
    assert_eq!(u.path, "/0");
    assert_eq!(u.param("db"), Some("1"));
    assert_eq!(u.fragment.as_deref(), Some("insecure"));
    let u = ok("zk://us%65r:p%2Fw%3F%25%2C@a/chroot");
    assert_eq!(u.user.as_deref(), Some("user"));
    assert_eq!(u.password.as_deref(), Some("p/w?%,"));
    assert_eq!(u.path, "/chroot");
    let u = ok("redis://:pw@h");
    assert_eq!((u.user, u.password.as_deref()), (None, Some("pw")));
    let u = ok("redis://tok@h");
    assert_eq!((u.user.as_deref(), u.password), (Some("tok"), None));
}

#[test]
fn no_credentials_when_the_path_comes_first() {
    let u = ok("redis+unix:///r.sock?pass=a@b&db=1");
    assert!(u.user.is_none() && u.password.is_none() && u.hosts.is_empty());
    assert_eq!(u.path, "/r.sock");
    assert_eq!(u.param("pass"), Some("a@b"));
}

#[test]
fn query_pairs_are_decoded_and_never_repeated() {
    let u = ok("etcd://h?prefix=a%2Fb+c");
    assert_eq!(u.param("prefix"), Some("a/b+c"));
    assert!(parse("etcd://h?prefix=a&prefix=b")
        .unwrap_err()
        .contains("'prefix' is given twice"));
    assert!(parse("etcd://h?pre%66ix=a&prefix=b").is_err());
    assert!(parse("etcd://h?prefix=%zz").is_err());
    assert_eq!(
        ok("redis://h?a=1").only_params(&["b", "c"]).unwrap_err(),
        "unknown parameter 'a' (known: b, c)"
    );
}

#[test]
fn bad_hosts_and_escapes() {
    for (url, why) in [
        ("redis://h:x", "bad port 'x'"),
        ("redis://h:70000", "bad port '70000'"),
        ("redis://[::1", "unclosed '['"),
        ("redis://:1", "a host is empty"),
        ("redis://u:p%zz@h", "bad escape in the password"),
        ("redis://u%zz@h", "bad escape in the user name"),
        ("redis", "no scheme"),
    ] {
        let e = parse(url).unwrap_err();
        assert!(e.contains(why), "{url}: {e}");
    }
}

#[test]
fn redaction() {
    for (url, shown) in [
        ("redis://:secret@h:6379/0", "redis://***@h:6379/0"),
        ("redis://u:secret@h", "redis://***@h"),
        ("redis://h:1", "redis://h:1"),
        ("rediss://tok@h", "rediss://tok@h"),
        ("redis://u:p@ss@h/1", "redis://***@h/1"),
        (
            "redis+unix:///run/r.sock?db=1&pass=secret&user=u",
            "redis+unix:///run/r.sock?db=1&pass=***&user=u",
        ),
        (
            "redis://:secret@h/0?password=other",
            "redis://***@h/0?password=***",
        ),
        ("redis://u:p?ss@h/0", "redis://***@h/0"),
        ("redis://u:pa/ss@h:6379/0", "redis://***@h:6379/0"),
        ("etcd://u:p?ss@127.0.0.1:1", "etcd://***@127.0.0.1:1"),
        (
            "redis+unix:///r.sock?pass=a@b&db=1",
            "redis+unix:///r.sock?pass=***&db=1",
        ),
        // Unreadable: everything up to the last '@' goes, the user too.
        ("zk://u:s3cr/et@127.0.0.1:x", "zk://***@127.0.0.1:x"),
        ("zk://user@h?a=1&a=2", "zk://***@h?a=1&a=2"),
        ("u:secret@h", "***@h"),
        ("redis:/u:pa://ss@h", "***@h"),
        ("file:///tmp/x", "file:///tmp/x"),
    ] {
        assert_eq!(redact(url), shown, "{url}");
    }
}

#[test]
fn stripping() {
    for (url, stripped) in [
        ("redis://:secret@h:6379/0", "redis://h:6379/0"),
        ("redis://u:secret@h", "redis://u@h"),
        ("redis://u@h", "redis://u@h"),
        ("rediss://u:p@ss@h/1#insecure", "rediss://u@h/1#insecure"),
        ("redis://u:pa/ss@h/1", "redis://u@h/1"),
        (
            "redis+unix:///r.sock?pass=a@b&db=1",
            "redis+unix:///r.sock?db=1",
        ),
        ("s2:26379/mymaster", "s2:26379/mymaster"),
    ] {
        assert_eq!(strip_password(url), stripped, "{url}");
    }
}

#[test]
fn encoding_round_trips() {
    let s = "p@ss/w?rd#%,: é🔒";
    assert_eq!(percent_decode(&percent_encode(s)).as_deref(), Some(s));
}

#[test]
fn written_for_a_client_as_read() {
    let u = ok("mysql://u%20x:p@ss:w@h:3306,[::1],k/app%2F1?x=1");
    assert_eq!(
        u.for_client("mysql", &[("a b", "c&d")]).unwrap(),
        "mysql://u%20x:p%40ss%3Aw@h:3306,[::1],k/app%2F1?a%20b=c%26d"
    );
    assert_eq!(
        ok("postgres://h").for_client("postgresql", &[]).unwrap(),
        "postgresql://h"
    );
    assert!(ok("postgres://h/a/b")
        .for_client("postgresql", &[])
        .is_err());
}

#[test]
fn credentials_come_both_or_not_at_all() {
    assert_eq!(ok("zk://h").both_credentials("zk://"), Ok(None));
    assert_eq!(
        ok("zk://u:p@h").both_credentials("zk://"),
        Ok(Some(("u".into(), "p".into())))
    );
    let err = ok("etcds://u@h").both_credentials("etcd://").unwrap_err();
    assert_eq!(err, "give both user and password: etcd://USER:PASSWORD@…");
}

#[test]
fn a_short_password_is_scrubbed_where_it_stands_and_nowhere_else() {
    let msg = "postgres://u:p@h:5432/db: password=p rejected\nfor 'p' (p)";
    assert_eq!(
        one_line(msg, &["p"]),
        "postgres://u:***@h:5432/db: password=*** rejected for '***' (***)"
    );
    let msg = "postgresql://u:pg@h/postgres?password=pg: pg_hba.conf says no";
    assert_eq!(
        one_line(msg, &["pg"]),
        "postgresql://u:***@h/postgres?password=***: pg_hba.conf says no"
    );
}

#[test]
fn a_password_named_like_the_scheme_leaves_the_scheme_readable() {
    let msg = "mysql://u:mysql@h/db: access denied for mysql";
    assert_eq!(
        one_line(msg, &["mysql"]),
        "mysql://u:***@h/db: access denied for ***"
    );
}

#[test]
fn a_password_of_punctuation_goes_wherever_it_stands() {
    let msg = "redis://u:@:/@h: AUTH @:/ failed, x@:/y";
    assert_eq!(
        one_line(msg, &["@:/"]),
        "redis://u:***@h: AUTH *** failed, x***y"
    );
    // Every secret is scrubbed; an empty one is no secret.
    assert_eq!(one_line("a:Xy@b c:Zw", &["Xy", "", "Zw"]), "a:***@b c:***");
}
