
use builtin;
use str;

set edit:completion:arg-completer[dlock] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'dlock'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'dlock'= {
            cand -u 'Backend URL (none: the local store; several: a quorum; full forms: --help): redis[s]://HOST[:PORT]         one Redis server; several: Redlock redis+unix:///PATH             one Redis server on a Unix socket redis+sentinel://S1,S2/MASTER  the master Sentinel names redis+cluster://N1,N2          a Redis Cluster etcd[s]://H1,H2                one etcd cluster memcached://HOST[:PORT]        memcached, best effort zk[s]://H1,H2[/CHROOT]         one ZooKeeper ensemble postgres://[USER@]HOST/DB      PostgreSQL mysql://[USER@]HOST/DB         MySQL or MariaDB file://DIR                     the local store (the default)'
            cand --url 'Backend URL (none: the local store; several: a quorum; full forms: --help): redis[s]://HOST[:PORT]         one Redis server; several: Redlock redis+unix:///PATH             one Redis server on a Unix socket redis+sentinel://S1,S2/MASTER  the master Sentinel names redis+cluster://N1,N2          a Redis Cluster etcd[s]://H1,H2                one etcd cluster memcached://HOST[:PORT]        memcached, best effort zk[s]://H1,H2[/CHROOT]         one ZooKeeper ensemble postgres://[USER@]HOST/DB      PostgreSQL mysql://[USER@]HOST/DB         MySQL or MariaDB file://DIR                     the local store (the default)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand exec 'Run CMD while holding KEY'
            cand lock 'Acquire KEY and leave it held until `unlock` or the TTL ends'
            cand unlock 'Release KEY'
            cand renew 'Extend a held lease'
            cand status 'Show who holds what (every held lock when no key is given)'
            cand wait 'Block until KEY is free, without taking it'
            cand elect 'Run CMD while this process leads NAME (hot standby on N hosts)'
            cand leader 'Show who leads NAME: value, host, pid, term (token) and for how long'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'dlock;exec'= {
            cand --ttl 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)'
            cand -w 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69'
            cand --timeout 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69'
            cand -E 'Exit code when the lock was not obtained (0-255)'
            cand --conflict-exit-code 'Exit code when the lock was not obtained (0-255)'
            cand --if-unavailable 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"'
            cand --limit 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)'
            cand --priority 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)'
            cand -c 'Run STRING with `sh -c` instead of CMD, as flock(1) does'
            cand --command 'Run STRING with `sh -c` instead of CMD, as flock(1) does'
            cand --max-runtime 'Terminate CMD''s process group (SIGTERM) once it has run DUR, release the lock, and exit 124, as timeout(1) does'
            cand --metrics-file 'Write node_exporter textfile metrics for KEY to PATH when the run ends (last start, end and success times, duration, wait, exit code, lease lost); with $DLOCK_METRICS_DIR, one file per key there'
            cand --hold-at-least 'Keep KEY held until DUR after it was acquired, even when CMD ends sooner: the lease is left to expire by itself (on every backend, the local store too) and dlock exits with CMD''s status at once. Stops a short job from running again on a host whose clock or cron fires a little later. Only the outermost exec holds on; a run cut short by --max-runtime holds on too (exit 124); a lost lease (79) holds nothing'
            cand --kill-after 'With --max-runtime: SIGKILL the group this long after the SIGTERM'
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand -n 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --no-wait 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --nonblock 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --no-fair 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)'
            cand -s 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --shared 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --supersede 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;lock'= {
            cand --ttl 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)'
            cand -w 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69'
            cand --timeout 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69'
            cand -E 'Exit code when the lock was not obtained (0-255)'
            cand --conflict-exit-code 'Exit code when the lock was not obtained (0-255)'
            cand --if-unavailable 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"'
            cand --limit 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)'
            cand --priority 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)'
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand -n 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --no-wait 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --nonblock 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --no-fair 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)'
            cand -s 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --shared 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --supersede 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is'
            cand --export 'Print `export DLOCK_KEY=… DLOCK_OWNER=… DLOCK_FENCING_TOKEN=…` for `eval` (--json wins when both are given)'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;unlock'= {
            cand --owner 'The owner id printed by `lock` (default: $DLOCK_OWNER)'
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand --force 'Release whoever holds it (says so on stderr)'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;renew'= {
            cand --owner 'The owner id printed by `lock` (default: $DLOCK_OWNER)'
            cand --ttl 'New lease length, from now. An etcd lease keeps the TTL it was granted with: a longer one is refused'
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;status'= {
            cand --limit 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)'
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand --watch 'Keep showing the keys, redrawn in place on a terminal whenever they change (and at least every second); elsewhere, a new snapshot each time something changes. Ends on Ctrl-C (SIGINT), SIGTERM or SIGHUP, with exit 0'
            cand -s 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --shared 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;wait'= {
            cand -w 'Give up after DUR (exit 75). Default: wait forever'
            cand --timeout 'Give up after DUR (exit 75). Default: wait forever'
            cand --limit 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)'
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand -s 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --shared 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;elect'= {
            cand --ttl 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)'
            cand -w 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69'
            cand --timeout 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69'
            cand -E 'Exit code when the lock was not obtained (0-255)'
            cand --conflict-exit-code 'Exit code when the lock was not obtained (0-255)'
            cand --if-unavailable 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"'
            cand --limit 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)'
            cand --priority 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)'
            cand --value 'What the leader proclaims: shown by `dlock leader` and `status`, and given to CMD as DLOCK_LEADER_VALUE. Default: "HOST PID CMD", shortened'
            cand --metrics-file 'Write node_exporter textfile metrics for NAME to PATH at the end of each term (as exec does), with dlock_elect_lost_terms_total'
            cand -c 'Run STRING with `sh -c` instead of CMD'
            cand --command 'Run STRING with `sh -c` instead of CMD'
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand -n 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --no-wait 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --nonblock 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
            cand --no-fair 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)'
            cand -s 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --shared 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
            cand --supersede 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is'
            cand --rejoin 'When leadership is lost (CMD terminated, exit 79 otherwise), go back in line and run CMD again once elected again, instead of exiting (a store still out of reach then is tried again every second). Each lost term is one `term_lost` event (-v) and counts in --metrics-file'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;leader'= {
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand --watch 'Keep printing: one line (one JSON object with --json) each time the leader changes, `none` while nobody leads, until Ctrl-C (SIGINT), SIGTERM or SIGHUP (exit 0)'
            cand --here 'Print nothing; exit 0 when a process on this host leads NAME, 3 when not (nobody leads, or another host does): `dlock leader sched --here && ./only-on-the-leader`'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;completions'= {
            cand -u 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --url 'Backend URL; $DLOCK_URL when not given (details: dlock --help)'
            cand --log-format 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)'
            cand --json 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
            cand -q 'Say less on stderr (no waiting line, no notes)'
            cand --quiet 'Say less on stderr (no waiting line, no notes)'
            cand -v 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand --verbose 'Say more on stderr: one line per event (-v), renewals too (-vv)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'dlock;help'= {
            cand exec 'Run CMD while holding KEY'
            cand lock 'Acquire KEY and leave it held until `unlock` or the TTL ends'
            cand unlock 'Release KEY'
            cand renew 'Extend a held lease'
            cand status 'Show who holds what (every held lock when no key is given)'
            cand wait 'Block until KEY is free, without taking it'
            cand elect 'Run CMD while this process leads NAME (hot standby on N hosts)'
            cand leader 'Show who leads NAME: value, host, pid, term (token) and for how long'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'dlock;help;exec'= {
        }
        &'dlock;help;lock'= {
        }
        &'dlock;help;unlock'= {
        }
        &'dlock;help;renew'= {
        }
        &'dlock;help;status'= {
        }
        &'dlock;help;wait'= {
        }
        &'dlock;help;elect'= {
        }
        &'dlock;help;leader'= {
        }
        &'dlock;help;completions'= {
        }
        &'dlock;help;help'= {
        }
    ]
    $completions[$command]
}
