-- Helpers shared by every dlock script (prepended to each one).
--
-- A lock K owns these keys, all with the hash tag {K} so that they share one cluster slot:
--   lease  HASH  owner, token, depth, holder (JSON), acquired_ms (PEXPIRE ttl)
--   fence  STRING  fencing counter (INCR), never deleted nor expired
--   queue  ZSET  waiter id -> arrival ticket (FIFO order)
--   alive  ZSET  waiter id -> liveness deadline, server ms (a waiter refreshes it as it polls)
--   info   HASH  waiter id -> holder JSON, for `status`
--   wake:<waiter id>  LIST  a pending wake-up for that waiter (see wake)

-- Server time in milliseconds: one clock for every client. Scripts may read TIME because
-- Redis (5+, and only this way in 7) replicates their effects, not the scripts.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Removes one waiter from the queue; returns 1 when it was queued.
local function leave_queue(queue, alive, info, waiter)
  local n = redis.call('ZREM', queue, waiter)
  redis.call('ZREM', alive, waiter)
  redis.call('HDEL', info, waiter)
  return n
end

-- leave_queue, and the waiter's pending wake-up goes too (see wake).
local function dequeue(queue, alive, info, wake_prefix, waiter)
  local n = leave_queue(queue, alive, info, waiter)
  redis.call('DEL', wake_prefix .. waiter)
  return n
end

-- Drops waiters that stopped refreshing their liveness (killed, partitioned), plus any queue
-- entry without a liveness record, so a dead waiter never blocks the line. Their wake lists
-- (woken while dead) go too, when `wake_prefix` is given.
-- Returns the live head (or nil) and how many waiters were dropped.
local function prune(queue, alive, info, now, wake_prefix)
  local dropped = 0
  local function forget(ids)
    if wake_prefix and wake_prefix ~= '' then
      for _, id in ipairs(ids) do
        redis.call('DEL', wake_prefix .. id)
      end
    end
  end
  while true do
    local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now, 'LIMIT', 0, 500)
    if #dead == 0 then break end
    redis.call('ZREM', queue, unpack(dead))
    redis.call('ZREM', alive, unpack(dead))
    redis.call('HDEL', info, unpack(dead))
    forget(dead)
    dropped = dropped + #dead
  end
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head or redis.call('ZSCORE', alive, head) then
      return head, dropped
    end
    leave_queue(queue, alive, info, head)
    forget({head})
    dropped = dropped + 1
  end
end

-- Tells the head waiter, and only it, that the lock may be free (no thundering herd): one
-- element in its wake list, which it pops with BLPOP on the connection it already has. A
-- wake that comes while it is not blocked stays there for its next BLPOP, so none is lost.
-- The list expires on its own if the waiter died.
local WAKE_TTL_MS = 60000
local function wake(wake_prefix, head)
  if head then
    local k = wake_prefix .. head
    if redis.call('RPUSH', k, 1) > 1 then
      redis.call('LTRIM', k, 0, 0)
    end
    redis.call('PEXPIRE', k, WAKE_TTL_MS)
  end
end
