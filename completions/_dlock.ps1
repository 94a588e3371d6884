
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'dlock' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'dlock'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'dlock' {
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL (none: the local store; several: a quorum; full forms: --help): redis[s]://HOST[:PORT]         one Redis server; several: Redlock redis+unix:///PATH             one Redis server on a Unix socket redis+sentinel://S1,S2/MASTER  the master Sentinel names redis+cluster://N1,N2          a Redis Cluster etcd[s]://H1,H2                one etcd cluster memcached://HOST[:PORT]        memcached, best effort zk[s]://H1,H2[/CHROOT]         one ZooKeeper ensemble postgres://[USER@]HOST/DB      PostgreSQL mysql://[USER@]HOST/DB         MySQL or MariaDB file://DIR                     the local store (the default)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL (none: the local store; several: a quorum; full forms: --help): redis[s]://HOST[:PORT]         one Redis server; several: Redlock redis+unix:///PATH             one Redis server on a Unix socket redis+sentinel://S1,S2/MASTER  the master Sentinel names redis+cluster://N1,N2          a Redis Cluster etcd[s]://H1,H2                one etcd cluster memcached://HOST[:PORT]        memcached, best effort zk[s]://H1,H2[/CHROOT]         one ZooKeeper ensemble postgres://[USER@]HOST/DB      PostgreSQL mysql://[USER@]HOST/DB         MySQL or MariaDB file://DIR                     the local store (the default)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('exec', 'exec', [CompletionResultType]::ParameterValue, 'Run CMD while holding KEY')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Acquire KEY and leave it held until `unlock` or the TTL ends')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release KEY')
            [CompletionResult]::new('renew', 'renew', [CompletionResultType]::ParameterValue, 'Extend a held lease')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds what (every held lock when no key is given)')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Block until KEY is free, without taking it')
            [CompletionResult]::new('elect', 'elect', [CompletionResultType]::ParameterValue, 'Run CMD while this process leads NAME (hot standby on N hosts)')
            [CompletionResult]::new('leader', 'leader', [CompletionResultType]::ParameterValue, 'Show who leads NAME: value, host, pid, term (token) and for how long')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'dlock;exec' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock was not obtained (0-255)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock was not obtained (0-255)')
            [CompletionResult]::new('--if-unavailable', '--if-unavailable', [CompletionResultType]::ParameterName, 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--priority', '--priority', [CompletionResultType]::ParameterName, 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run STRING with `sh -c` instead of CMD, as flock(1) does')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run STRING with `sh -c` instead of CMD, as flock(1) does')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Terminate CMD''s process group (SIGTERM) once it has run DUR, release the lock, and exit 124, as timeout(1) does')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'Write node_exporter textfile metrics for KEY to PATH when the run ends (last start, end and success times, duration, wait, exit code, lease lost); with $DLOCK_METRICS_DIR, one file per key there')
            [CompletionResult]::new('--hold-at-least', '--hold-at-least', [CompletionResultType]::ParameterName, 'Keep KEY held until DUR after it was acquired, even when CMD ends sooner: the lease is left to expire by itself (on every backend, the local store too) and dlock exits with CMD''s status at once. Stops a short job from running again on a host whose clock or cron fires a little later. Only the outermost exec holds on; a run cut short by --max-runtime holds on too (exit 124); a lost lease (79) holds nothing')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'With --max-runtime: SIGKILL the group this long after the SIGTERM')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--no-fair', '--no-fair', [CompletionResultType]::ParameterName, 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--supersede', '--supersede', [CompletionResultType]::ParameterName, 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;lock' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock was not obtained (0-255)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock was not obtained (0-255)')
            [CompletionResult]::new('--if-unavailable', '--if-unavailable', [CompletionResultType]::ParameterName, 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--priority', '--priority', [CompletionResultType]::ParameterName, 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--no-fair', '--no-fair', [CompletionResultType]::ParameterName, 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--supersede', '--supersede', [CompletionResultType]::ParameterName, 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is')
            [CompletionResult]::new('--export', '--export', [CompletionResultType]::ParameterName, 'Print `export DLOCK_KEY=… DLOCK_OWNER=… DLOCK_FENCING_TOKEN=…` for `eval` (--json wins when both are given)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;unlock' {
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'The owner id printed by `lock` (default: $DLOCK_OWNER)')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Release whoever holds it (says so on stderr)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;renew' {
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'The owner id printed by `lock` (default: $DLOCK_OWNER)')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'New lease length, from now. An etcd lease keeps the TTL it was granted with: a longer one is refused')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;status' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'Keep showing the keys, redrawn in place on a terminal whenever they change (and at least every second); elsewhere, a new snapshot each time something changes. Ends on Ctrl-C (SIGINT), SIGTERM or SIGHUP, with exit 0')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;wait' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Give up after DUR (exit 75). Default: wait forever')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up after DUR (exit 75). Default: wait forever')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;elect' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length; exec renews it every TTL/3 while the command runs. On etcd it is rounded up to whole seconds (never shortened)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up waiting after DUR (500ms, 30s, 5m; a bare number is seconds). Default: wait forever. A store that cannot be reached is tried again for this long too (at least 2s; 30s without --timeout), then exit 69')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock was not obtained (0-255)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock was not obtained (0-255)')
            [CompletionResult]::new('--if-unavailable', '--if-unavailable', [CompletionResultType]::ParameterName, 'When the backend cannot be reached: fail (exit 69), or skip: do nothing and exit with the conflict code (-E), with a note unless -q. There is no "run anyway"')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'A semaphore: up to N holders of KEY at once, each with its own owner id and fencing token, served in arrival order (as consul lock -n N). Every caller of KEY must give the same N: a different one, or a caller without --limit, is refused (exit 2) while holders exist. 1 is the default exclusive lock. On every backend (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--priority', '--priority', [CompletionResultType]::ParameterName, 'Queue priority, -1000000 to 1000000: a freed key goes to the highest-priority waiter, arrival order among equals. Kept by the local store, Redis, PostgreSQL and MySQL; refused (exit 2) on etcd and ZooKeeper (queue order shared with etcdctl lock and Curator), Redlock and Memcached (no queue), and by elect (a campaign is not a queue of jobs)')
            [CompletionResult]::new('--value', '--value', [CompletionResultType]::ParameterName, 'What the leader proclaims: shown by `dlock leader` and `status`, and given to CMD as DLOCK_LEADER_VALUE. Default: "HOST PID CMD", shortened')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'Write node_exporter textfile metrics for NAME to PATH at the end of each term (as exec does), with dlock_elect_lost_terms_total')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run STRING with `sh -c` instead of CMD')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run STRING with `sh -c` instead of CMD')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held (a store that cannot be reached is tried for 2s)')
            [CompletionResult]::new('--no-fair', '--no-fair', [CompletionResultType]::ParameterName, 'Let any waiter take a freed lock instead of serving waiters in arrival order (Redlock and Memcached never keep an order: there, waiters poll and any may win)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold KEY shared, beside other --shared holders (readers), as flock -s does; a caller without it (a writer) holds KEY alone. In arrival order: a waiting writer stops later readers, so readers cannot starve it (Redlock and Memcached keep no queue, so there is no order)')
            [CompletionResult]::new('--supersede', '--supersede', [CompletionResultType]::ParameterName, 'At most one pending --supersede waiter per key: a newer one makes the older give up at once (exit 80); the holder and plain waiters are never touched. Refused (exit 2) where --priority is')
            [CompletionResult]::new('--rejoin', '--rejoin', [CompletionResultType]::ParameterName, 'When leadership is lost (CMD terminated, exit 79 otherwise), go back in line and run CMD again once elected again, instead of exiting (a store still out of reach then is tried again every second). Each lost term is one `term_lost` event (-v) and counts in --metrics-file')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;leader' {
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'Keep printing: one line (one JSON object with --json) each time the leader changes, `none` while nobody leads, until Ctrl-C (SIGINT), SIGTERM or SIGHUP (exit 0)')
            [CompletionResult]::new('--here', '--here', [CompletionResultType]::ParameterName, 'Print nothing; exit 0 when a process on this host leads NAME, 3 when not (nobody leads, or another host does): `dlock leader sched --here && ./only-on-the-leader`')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;completions' {
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Backend URL; $DLOCK_URL when not given (details: dlock --help)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'The events of -v as `text` lines or `json` objects, one per line on stderr (json shows them without -v)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Machine-readable output on stdout (one JSON object, or one per line for lists)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say less on stderr (no waiting line, no notes)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: one line per event (-v), renewals too (-vv)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'dlock;help' {
            [CompletionResult]::new('exec', 'exec', [CompletionResultType]::ParameterValue, 'Run CMD while holding KEY')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Acquire KEY and leave it held until `unlock` or the TTL ends')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release KEY')
            [CompletionResult]::new('renew', 'renew', [CompletionResultType]::ParameterValue, 'Extend a held lease')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds what (every held lock when no key is given)')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Block until KEY is free, without taking it')
            [CompletionResult]::new('elect', 'elect', [CompletionResultType]::ParameterValue, 'Run CMD while this process leads NAME (hot standby on N hosts)')
            [CompletionResult]::new('leader', 'leader', [CompletionResultType]::ParameterValue, 'Show who leads NAME: value, host, pid, term (token) and for how long')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'dlock;help;exec' {
            break
        }
        'dlock;help;lock' {
            break
        }
        'dlock;help;unlock' {
            break
        }
        'dlock;help;renew' {
            break
        }
        'dlock;help;status' {
            break
        }
        'dlock;help;wait' {
            break
        }
        'dlock;help;elect' {
            break
        }
        'dlock;help;leader' {
            break
        }
        'dlock;help;completions' {
            break
        }
        'dlock;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
