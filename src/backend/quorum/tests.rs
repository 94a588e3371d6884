//! The vote counting, with answers made up: no server.

use std::time::{Duration, Instant};

use super::votes::*;
use crate::backend::store::Busy;
use crate::backend::{Holder, Lease, LockInfo, Sharing};

fn grant(owner: &str, token: u64, reentered: bool) -> Answer<&'static str> {
    Answer::Granted(Lease {
        key: "k".into(),
        owner: owner.into(),
        fencing_token: token,
        ttl: Duration::from_secs(10),
        reentered,
        sent_at: Instant::now(),
        bound: false,
        expires_at_ms: 0,
    })
}

fn held_by(owner: &str, token: u64, ttl_ms: u64) -> Answer<&'static str> {
    Answer::Busy(Busy {
        holder: Some(LockInfo {
            key: "k".into(),
            owner: owner.into(),
            fencing_token: token,
            holder: Holder::default(),
            ttl_left_ms: Some(ttl_ms),
            depth: 0,
        }),
        retry: Some(Duration::from_millis(ttl_ms)),
        ..Busy::default()
    })
}

#[test]
fn readers_and_writers_need_a_majority() {
    for n in 1..=7 {
        assert_eq!(quorum_for(n, Sharing::Exclusive), quorum(n));
        assert_eq!(quorum_for(n, Sharing::Shared), quorum(n));
    }
}

#[test]
fn a_semaphore_needs_enough_servers_that_no_server_can_count_n_plus_one_holders() {
    assert_eq!(quorum_for(3, Sharing::Limit(2)), 3);
    assert_eq!(quorum_for(5, Sharing::Limit(2)), 4);
    assert_eq!(quorum_for(5, Sharing::Limit(4)), 5);
    assert_eq!(quorum_for(2, Sharing::Limit(2)), 2);
    for n in 1..=9 {
        for limit in 2..=12u32 {
            let q = quorum_for(n, Sharing::Limit(limit));
            let l = limit as usize;
            assert!(q >= quorum(n) && q <= n, "n={n} N={limit}: {q}");
            // N+1 holders on q servers each overfill some server; on q-1 they might not
            // (unless q-1 is below a majority, which is never allowed anyway).
            assert!((l + 1) * q > l * n, "n={n} N={limit}: {q}");
            assert!(
                q - 1 < quorum(n) || (l + 1) * (q - 1) <= l * n,
                "n={n} N={limit}: {q}"
            );
        }
    }
}

#[test]
fn quorums_are_strict_majorities() {
    let q: Vec<usize> = (1..=6).map(quorum).collect();
    assert_eq!(q, [1, 2, 2, 3, 3, 4]);
}

#[test]
fn a_majority_granted_wins_with_the_largest_token() {
    let t = tally(
        [
            grant("me", 7, false),
            held_by("b", 9, 500),
            grant("me", 8, false),
        ],
        3,
    );
    assert_eq!((t.answered, t.down, t.max_token), (3, 0, 9));
    assert_eq!(t.refused, [1]);
    assert_eq!(decide(&t, quorum(3)), Decision::Granted { token: 8 });
    // Server 0 granted with less: its counter is raised, with the refusing server's.
    assert_eq!(behind(&t.fresh, 8), (1, vec![0]));
    assert_eq!(t.others(), [1]);
    // Nothing beside the majority to give back.
    let won = decide(&t, quorum(3));
    assert_eq!(settle(&t, Some(&won)), GiveBack::default());
    assert_eq!(won.winner("me"), Some(("me".to_string(), 8, false)));
}

#[test]
fn a_split_vote_is_lost_and_every_grant_given_back() {
    // Five servers: two granted to us, two to someone else, one did not answer in time.
    let t = tally(
        [
            grant("me", 4, false),
            held_by("b", 5, 900),
            grant("me", 4, false),
            held_by("b", 5, 300),
            Answer::Slow("e: timed out"),
        ],
        0,
    );
    assert_eq!((t.answered, t.down, t.failed.len()), (4, 0, 1));
    assert_eq!(decide(&t, quorum(5)), Decision::Lost);
    let (lock, on) = t.holder.as_ref().expect("holder");
    assert_eq!((lock.owner.as_str(), *on), ("b", 2));
    assert_eq!(t.retry, Some(Duration::from_millis(300)));
    // The slow server may have granted: it is asked to give back too.
    let back = settle(&t, None);
    assert_eq!(back.fresh, [0, 2, 4]);
    assert!(back.nested.is_empty());
}

#[test]
fn all_errors_decide_nothing_and_say_so() {
    let t = tally(
        [
            Answer::Down("a: refused"),
            Answer::Down("b: reset"),
            Answer::Slow("c: timed out"),
        ],
        12,
    );
    assert_eq!((t.answered, t.down, t.max_token), (0, 2, 12));
    assert_eq!(t.failed, ["a: refused", "b: reset", "c: timed out"]);
    assert_eq!(decide(&t, quorum(3)), Decision::Lost);
    assert_eq!(settle(&t, None).fresh, [0, 1, 2]);
    assert_eq!(
        answered(t.answered, 3, quorum(3)),
        "0 of 3 servers answered, 2 needed"
    );
    assert_eq!(verdict(0, 0, 2), Verdict::Unavailable);
}

#[test]
fn a_tie_with_an_even_number_of_servers_is_no_majority() {
    let t = tally(
        [
            grant("me", 1, false),
            grant("me", 1, false),
            held_by("b", 2, 100),
            held_by("b", 2, 100),
        ],
        0,
    );
    assert_eq!(quorum(4), 3);
    assert_eq!(decide(&t, quorum(4)), Decision::Lost);
    assert_eq!(majority_owner(["me", "me", "b", "b"], quorum(4)), None);
    assert_eq!(verdict(2, 2, quorum(4)), Verdict::Unavailable);
    assert_eq!(
        done_on("renewed", 2, 4, quorum(4)),
        "renewed on 2 of 4 servers, 3 needed"
    );
}

#[test]
fn validity_is_what_the_time_taken_and_the_drift_leave() {
    let ms = Duration::from_millis;
    // Drift of a 1 s lease: 1% + 2 ms.
    assert_eq!(validity(ms(1_000), ms(100)), Some(ms(888)));
    assert_eq!(validity(ms(1_000), ms(988)), None);
    assert_eq!(validity(ms(1_000), ms(2_000)), None);
    assert_eq!(validity(ms(1_000), ms(987)), Some(ms(1)));
}

#[test]
fn reentry_counts_on_a_majority_of_one_owner() {
    let t = tally(
        [
            grant("parent", 3, true),
            grant("me", 6, false),
            grant("parent", 5, true),
        ],
        0,
    );
    let won = decide(&t, quorum(3));
    assert_eq!(
        won,
        Decision::Reentered {
            owner: "parent".into(),
            token: 5
        }
    );
    // The fresh grant beside the majority is given back, the re-entries kept.
    let back = settle(&t, Some(&won));
    assert_eq!((back.fresh, back.nested), (vec![1], vec![]));
    assert_eq!(won.winner("me"), Some(("parent".to_string(), 5, true)));
    assert_eq!(Decision::Lost.winner("me"), None);

    // Re-entries for two different owners make no majority: all of them go back.
    let t = tally(
        [
            grant("parent", 3, true),
            grant("other", 4, true),
            held_by("b", 4, 10),
        ],
        0,
    );
    assert_eq!(decide(&t, quorum(3)), Decision::Lost);
    let back = settle(&t, None);
    assert_eq!(
        back.nested,
        [(0, "parent".to_string()), (1, "other".to_string())]
    );
    assert_eq!(t.others(), [2, 0, 1]);
}

#[test]
fn renew_and_release_settle_as_soon_as_the_outcome_is_known() {
    // 3 servers, quorum 2.
    assert!(!settled(1, 0, 0, 3, 2));
    assert!(settled(2, 0, 0, 3, 2));
    assert!(settled(0, 2, 0, 3, 2));
    assert!(settled(1, 1, 1, 3, 2));
    assert!(settled(0, 1, 1, 3, 2));
    assert_eq!(verdict(2, 1, 2), Verdict::Done);
    assert_eq!(verdict(1, 2, 2), Verdict::Refused);
    assert_eq!(verdict(1, 1, 2), Verdict::Unavailable);
}

#[test]
fn a_lease_lasts_while_a_majority_has_it() {
    assert_eq!(quorum_ttl(vec![100, 900, 500], 2), 500);
    assert_eq!(quorum_ttl(vec![100, 900, 500, 700, 300], 3), 500);
    assert_eq!(majority_owner(["a", "b", "a"], 2), Some("a"));
    assert_eq!(most_named(["a", "b", "b"]), Some("b"));
    assert_eq!(most_named([]), None);
}

mod outcomes {
    use std::time::{Duration, Instant};

    use crate::backend::quorum::outcome::*;
    use crate::backend::{Holder, KeyStatus, LastRuns, Lease, LockInfo, Released};
    use crate::error::Error;

    fn down(server: &str) -> Error {
        Error::Unavailable(format!("{server}: lock 'k': cannot connect: refused"))
    }

    fn lock(owner: &str, token: u64, ttl_ms: u64) -> KeyStatus {
        let info = LockInfo {
            key: "k".into(),
            owner: owner.into(),
            fencing_token: token,
            holder: Holder::default(),
            ttl_left_ms: Some(ttl_ms),
            depth: 1,
        };
        KeyStatus::exclusive("k", Some(info))
    }

    #[test]
    fn a_release_is_done_on_a_majority_and_refused_by_one() {
        let ok = |owner: &str| {
            Ok(Released {
                previous_owner: Some(owner.into()),
                still_held: false,
            })
        };
        let r = released("q", "k", vec![ok("me"), Err(down("b")), ok("me")], 2).unwrap();
        assert_eq!(r.previous_owner.as_deref(), Some("me"));
        let gone = || Err(Error::lease_gone("release", "k", "m"));
        let e = released("q", "k", vec![gone(), gone(), ok("me")], 2).unwrap_err();
        assert!(matches!(e, Error::NotOwner(_)), "{e}");
        let e = released("q", "k", vec![gone(), Err(down("b")), ok("me")], 2).unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)), "{e}");
        assert!(
            e.to_string()
                .contains("released on 1 of 3 servers, 2 needed"),
            "{e}"
        );
    }

    /// Short of a majority because servers are refused, reset or silent (transient), the
    /// renewal, release or read is transient too: a holder renews on, `unlock` and
    /// `status` ride it out; one server that refused the password makes it fatal.
    #[test]
    fn short_of_a_majority_is_transient_when_every_failure_is() {
        let lost = |s: &str| Error::Transient(format!("{s}: lock 'k': connection reset"));
        let gone = || Err(Error::lease_gone("release", "k", "m"));
        let freed = || {
            Ok(Released {
                previous_owner: None,
                still_held: false,
            })
        };
        let e = released("q", "k", vec![gone(), Err(lost("b")), freed()], 2).unwrap_err();
        assert!(e.is_retryable(), "{e}");
        let fatal = vec![Err(lost("a")), Err(down("b")), freed()];
        assert!(!released("q", "k", fatal, 2).unwrap_err().is_retryable());
        let r = |failed| Renewals {
            failed,
            asked: 3,
            ..Renewals::default()
        };
        let (ttl, now) = (Duration::from_secs(3), Instant::now());
        let e = renewed(
            "q",
            ("k", "me"),
            (ttl, now),
            r(vec![lost("a"), lost("b")]),
            2,
        );
        assert!(e.unwrap_err().is_retryable());
        let e = renewed(
            "q",
            ("k", "me"),
            (ttl, now),
            r(vec![lost("a"), down("b")]),
            2,
        );
        assert!(matches!(e.unwrap_err(), Error::Unavailable(_)));
        let servers = ["a".to_string(), "b".to_string(), "c".to_string()];
        let replies = vec![Err(lost("a")), Err(lost("b")), Ok(vec![])];
        let e = status("q", &servers, &[], replies, 2).unwrap_err();
        assert!(e.is_retryable(), "{e}");
    }

    #[test]
    fn run_records_need_a_majority_to_write_and_to_read() {
        assert!(run_kept("q", "k", vec![Ok(()), Err(down("b")), Ok(())], 2).is_ok());
        let e = run_kept("q", "k", vec![Ok(()), Err(down("b")), Err(down("c"))], 2);
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("1 of 3 servers kept it, 2 needed") && e.contains("c:"),
            "{e}"
        );
        let none = || Ok(LastRuns::default());
        assert!(newest_runs("q", "k", vec![none(), Err(down("b")), none()], 2).is_ok());
        let e = newest_runs("q", "k", vec![none(), Err(down("b")), Err(down("c"))], 2);
        assert!(e.is_err());
    }

    #[test]
    fn status_shows_every_server_and_the_lock_a_majority_agrees_on() {
        let servers = ["a".to_string(), "b".to_string(), "c".to_string()];
        let keys = ["k".to_string()];
        let replies = vec![
            Ok(vec![lock("me", 5, 900)]),
            Err(down("b")),
            Ok(vec![lock("me", 6, 400)]),
        ];
        let st = status("q", &servers, &keys, replies, 2).unwrap();
        let l = st[0].lock.as_ref().expect("held on a majority");
        assert_eq!((l.fencing_token, l.ttl_left_ms), (6, Some(400)));
        let views = st[0].servers.as_ref().unwrap();
        assert_eq!(
            views[1].error.as_deref(),
            Some("lock 'k': cannot connect: refused")
        );
        assert!(views[0].agrees && !views[1].agrees && views[2].agrees);
        // Split owners: no lock, and nothing listed without names.
        let split = || {
            vec![
                Ok(vec![lock("a", 1, 9)]),
                Ok(vec![lock("b", 2, 9)]),
                Err(down("c")),
            ]
        };
        let st = status("q", &servers, &keys, split(), 2).unwrap();
        assert!(st[0].lock.is_none());
        assert!(status("q", &servers, &[], split(), 2).unwrap().is_empty());
        let e = status(
            "q",
            &servers,
            &keys,
            vec![Err(down("a")), Err(down("b")), Ok(vec![])],
            2,
        );
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("1 of 3 servers answered, 2 needed"));
    }

    /// A key held as a semaphore of 3 on one server, by `holders` (owner, token, ttl).
    fn group(holders: &[(&str, u64, u64)]) -> KeyStatus {
        let infos: Vec<LockInfo> = holders
            .iter()
            .map(|(o, t, ttl)| lock(o, *t, *ttl).lock.unwrap())
            .collect();
        KeyStatus::group("k", crate::backend::Sharing::Limit(3), infos)
    }

    #[test]
    fn status_lists_every_holder_a_majority_has() {
        let servers = ["a".to_string(), "b".to_string(), "c".to_string()];
        let keys = ["k".to_string()];
        let replies = vec![
            Ok(vec![group(&[("x", 4, 900), ("y", 5, 800)])]),
            Ok(vec![group(&[("y", 5, 700), ("z", 6, 900)])]),
            Ok(vec![group(&[("x", 4, 500), ("y", 5, 900)])]),
        ];
        let st = status("q", &servers, &keys, replies, 2).unwrap();
        let owners: Vec<&str> = st[0].holders.iter().map(|h| h.owner.as_str()).collect();
        // z is on one server only: not a holder.
        assert_eq!(owners, ["x", "y"]);
        assert_eq!(st[0].sharing, crate::backend::Sharing::Limit(3));
        assert_eq!(st[0].lock.as_ref().map(|l| l.owner.as_str()), Some("x"));
        // Each holder lasts while a majority still has it.
        assert_eq!(st[0].holders[1].ttl_left_ms, Some(800));
        let views = st[0].servers.as_ref().unwrap();
        assert!(views[0].agrees && !views[1].agrees && views[2].agrees);
    }

    #[test]
    fn a_renewal_counts_its_validity_from_when_the_lease_began() {
        let lease = |token| Lease {
            key: "k".into(),
            owner: "me".into(),
            fencing_token: token,
            ttl: Duration::from_secs(3),
            reentered: false,
            sent_at: Instant::now(),
            bound: false,
            expires_at_ms: 0,
        };
        let r = || Renewals {
            renewed: vec![lease(4), lease(7)],
            asked: 3,
            ..Renewals::default()
        };
        let ttl = Duration::from_secs(3);
        let l = renewed("q", ("k", "me"), (ttl, Instant::now()), r(), 2).unwrap();
        assert_eq!(l.fencing_token, 7);
        // Begun a second earlier (memcached's early expiry), three seconds ago: nothing left.
        let long_ago = Instant::now() - Duration::from_secs(3);
        let e = renewed("q", ("k", "me"), (ttl, long_ago), r(), 2).unwrap_err();
        assert!(e.to_string().contains("too late"), "{e}");
        let refused = Renewals {
            refused: vec![
                Error::lease_gone("renew", "k", "a"),
                Error::lease_gone("renew", "k", "b"),
            ],
            asked: 3,
            ..Renewals::default()
        };
        let e = renewed("q", ("k", "me"), (ttl, Instant::now()), refused, 2).unwrap_err();
        assert!(matches!(e, Error::NotOwner(_)), "{e}");
    }
}
