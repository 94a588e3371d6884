-- A waiter gives up (timeout, signal, dropped): leave the line; if the lock is free, the
-- new head must not sleep through its turn.
-- KEYS: queue, alive, info, lease
-- ARGV: waiter, wake_prefix
-- Returns 1 when the waiter was queued.
local queue, alive, info, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local was_queued = leave_queue(queue, alive, info, ARGV[1])
redis.call('DEL', ARGV[2] .. ARGV[1])
if was_queued == 1 and redis.call('EXISTS', lease) == 0 then
  local head = prune(queue, alive, info, now_ms())
  wake(ARGV[2], head)
end
return was_queued
