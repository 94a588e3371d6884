# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_dlock_global_optspecs
    string join \n u/url= json q/quiet v/verbose log-format= h/help V/version
end

function __fish_dlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_dlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_dlock_using_subcommand
    set -l cmd (__fish_dlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c dlock -n "__fish_dlock_needs_command" -s u -l url -d 'Backend URL (none: the local store; several: a quorum; full forms: --help): redis[s]://HOST[:PORT]         one Redis server; several: Redlock redis+unix:///PATH             one Redis server on a Unix socket redis+sentinel://S1,S2/MASTER  the master Sentinel names redis+cluster://N1,N2          a Redis Cluster etcd[s]://H1,H2                one etcd cluster memcached://HOST[:PORT]        memcached, best effort zk[s]://H1,H2[/CHROOT]         one ZooKeeper ensemble postgres://[USER@]HOST/DB      PostgreSQL mysql://[USER@]HOST/DB         MySQL or MariaDB file://DIR                     the local store (the default)' -r
complete -c dlock -n "__fish_dlock_needs_command" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_needs_command" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_needs_command" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_needs_command" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_needs_command" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "exec" -d 'Run CMD while holding KEY'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "lock" -d 'Acquire KEY and leave it held until `unlock` or the TTL ends'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "unlock" -d 'Release KEY'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "renew" -d 'Extend a held lease'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "status" -d 'Show who holds what (every held lock when no key is given)'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "wait" -d 'Block until KEY is free, without taking it'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "elect" -d 'Run CMD while this process leads NAME (hot standby on N hosts)'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "leader" -d 'Show who leads NAME: value, host, pid, term (token) and for how long'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l ttl -d 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s w -l timeout -d 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s E -l conflict-exit-code -d 'Exit code when the lock was not obtained (0-255)' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l if-unavailable -d 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"' -r -f -a "fail\t'Exit 69 (backend unavailable)'
skip\t'Do not run: exit with the conflict code, as if the lock were held'"
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l limit -d 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l priority -d 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s c -l command -d 'Run STRING with `sh -c` instead of CMD, as flock(1) does' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l max-runtime -d 'Terminate CMD\'s process group (SIGTERM) once it has run DUR, release the lock, and exit 124, as timeout(1) does' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l metrics-file -d 'Write node_exporter textfile metrics for KEY to PATH when the run ends (last start, end and success times, duration, wait, exit code, lease lost); with $DLOCK_METRICS_DIR, one file per key there' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l hold-at-least -d 'Keep KEY held until DUR after it was acquired, even when CMD ends sooner: the lease is left to expire by itself (on every backend, the local store too) and dlock exits with CMD\'s status at once. Stops a short job from running again on a host whose clock or cron fires a little later. Only the outermost exec holds on; a run cut short by --max-runtime holds on too (exit 124); a lost lease (79) holds nothing' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l kill-after -d 'With --max-runtime: SIGKILL the group this long after the SIGTERM' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s n -l no-wait -l nonblock -d 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l no-fair -d 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s s -l shared -d 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l supersede -d 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand exec" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l ttl -d 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s w -l timeout -d 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s E -l conflict-exit-code -d 'Exit code when the lock was not obtained (0-255)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l if-unavailable -d 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"' -r -f -a "fail\t'Exit 69 (backend unavailable)'
skip\t'Do not run: exit with the conflict code, as if the lock were held'"
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l limit -d 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l priority -d 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s n -l no-wait -l nonblock -d 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l no-fair -d 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s s -l shared -d 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l supersede -d 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l export -d 'Print `export DLOCK_KEY=… DLOCK_OWNER=… DLOCK_FENCING_TOKEN=…` for `eval` (--json wins when both are given)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l owner -d 'The owner id printed by `lock` (default: $DLOCK_OWNER)' -r
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l force -d 'Release whoever holds it (says so on stderr)'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand renew" -l owner -d 'The owner id printed by `lock` (default: $DLOCK_OWNER)' -r
complete -c dlock -n "__fish_dlock_using_subcommand renew" -l ttl -d 'New lease length, from now. An etcd lease keeps the TTL it was granted with: a longer one is refused' -r
complete -c dlock -n "__fish_dlock_using_subcommand renew" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand renew" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand renew" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand renew" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand renew" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand renew" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand status" -l limit -d 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)' -r
complete -c dlock -n "__fish_dlock_using_subcommand status" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand status" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand status" -l watch -d 'Keep showing the keys, redrawn in place on a terminal whenever they change (and at least every second); elsewhere, a new snapshot each time something changes. Ends on Ctrl-C (SIGINT), SIGTERM or SIGHUP, with exit 0'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s s -l shared -d 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
complete -c dlock -n "__fish_dlock_using_subcommand status" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s w -l timeout -d 'Give up after DUR (exit 75). Default: wait forever' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l limit -d 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s s -l shared -d 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l ttl -d 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s w -l timeout -d 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s E -l conflict-exit-code -d 'Exit code when the lock was not obtained (0-255)' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l if-unavailable -d 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"' -r -f -a "fail\t'Exit 69 (backend unavailable)'
skip\t'Do not run: exit with the conflict code, as if the lock were held'"
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l limit -d 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l priority -d 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l value -d 'What the leader proclaims: shown by `dlock leader` and `status`, and given to CMD as DLOCK_LEADER_VALUE. Default: "HOST PID CMD", shortened' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l metrics-file -d 'Write node_exporter textfile metrics for NAME to PATH at the end of each term (as exec does), with dlock_elect_lost_terms_total' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s c -l command -d 'Run STRING with `sh -c` instead of CMD' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s n -l no-wait -l nonblock -d 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l no-fair -d 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s s -l shared -d 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l supersede -d 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l rejoin -d 'When leadership is lost (CMD terminated, exit 79 otherwise), go back in line and run CMD again once elected again, instead of exiting (a store still out of reach then is tried again every second). Each lost term is one `term_lost` event (-v) and counts in --metrics-file'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand elect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand leader" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand leader" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand leader" -l watch -d 'Keep printing: one line (one JSON object with --json) each time the leader changes, `none` while nobody leads, until Ctrl-C (SIGINT), SIGTERM or SIGHUP (exit 0)'
complete -c dlock -n "__fish_dlock_using_subcommand leader" -l here -d 'Print nothing; exit 0 when a process on this host leads NAME, 3 when not (nobody leads, or another host does): `dlock leader sched --here && ./only-on-the-leader`'
complete -c dlock -n "__fish_dlock_using_subcommand leader" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand leader" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand leader" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand leader" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s u -l url -d 'Backend URL; $DLOCK_URL when not given (details: dlock --help)' -r
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l log-format -d 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)' -r -f -a "text\t'`dlock: acquired \'k\' …`, for people'
json\t'One JSON object per line, for log shippers'"
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l json -d 'Machine-readable output on stdout (one JSON object, or one per line for lists)'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s q -l quiet -d 'Say less on stderr (no waiting line, no notes)'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s v -l verbose -d 'Say more on stderr: one line per event (-v), renewals too (-vv)'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "exec" -d 'Run CMD while holding KEY'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "lock" -d 'Acquire KEY and leave it held until `unlock` or the TTL ends'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "unlock" -d 'Release KEY'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "renew" -d 'Extend a held lease'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "status" -d 'Show who holds what (every held lock when no key is given)'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "wait" -d 'Block until KEY is free, without taking it'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "elect" -d 'Run CMD while this process leads NAME (hot standby on N hosts)'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "leader" -d 'Show who leads NAME: value, host, pid, term (token) and for how long'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "completions" -d 'Print a shell completion script'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from exec lock unlock renew status wait elect leader completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
