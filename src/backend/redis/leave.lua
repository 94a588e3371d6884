-- A waiter gives up (timeout, signal, dropped): leave the line; if the lock is free, the
-- new head must not sleep through its turn. An attempt of this waiter may have been granted
-- on its way while the waiter gave up (it never read the reply): that lease goes too.
-- The same for a place in the group (shared or semaphore holders); the new head is woken
-- only when it may be admitted.
-- KEYS: queue, alive, info, lease, group, ends
-- ARGV: waiter, wake_prefix, owner
-- Returns 1 when the waiter was queued.
local queue, alive, info, lease, group, ends =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local waiter, wake_prefix, owner = ARGV[1], ARGV[2], ARGV[3]
local was_queued = dequeue(queue, alive, info, wake_prefix, waiter)
local freed = owner ~= '' and redis.call('HGET', lease, 'owner') == owner
if freed then
  redis.call('DEL', lease)
elseif owner ~= '' and redis.call('HDEL', group, owner) == 1 then
  redis.call('ZREM', ends, owner)
  freed = true
end
if (was_queued == 1 or freed) and redis.call('EXISTS', lease) == 0 then
  wake_if_fits(queue, alive, info, lease, group, ends, now_ms(), wake_prefix)
end
return was_queued
