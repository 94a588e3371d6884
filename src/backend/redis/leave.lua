-- A waiter gives up (timeout, signal, dropped): leave the line; if the lock is free, the
-- new head must not sleep through its turn. An attempt of this waiter may have been granted
-- on its way while the waiter gave up (it never read the reply): that lease goes too.
-- KEYS: queue, alive, info, lease
-- ARGV: waiter, wake_prefix, owner
-- Returns 1 when the waiter was queued.
local queue, alive, info, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local waiter, wake_prefix, owner = ARGV[1], ARGV[2], ARGV[3]
local was_queued = dequeue(queue, alive, info, wake_prefix, waiter)
local freed = owner ~= '' and redis.call('HGET', lease, 'owner') == owner
if freed then
  redis.call('DEL', lease)
end
if (was_queued == 1 or freed) and redis.call('EXISTS', lease) == 0 then
  local head = prune(queue, alive, info, now_ms(), wake_prefix)
  wake(wake_prefix, head)
end
return was_queued
