-- Acquire, re-enter, or join the queue, in one round trip.
-- KEYS: lease, fence, queue, alive, info, unfair, group
-- ARGV: owner, ttl_ms, waiter, fair (0/1), enqueue (0/1/2), liveness_ms, wake_prefix,
--       holder (JSON: host, pid, user, command), floor, client_ms, priority,
--       supersede (0/1), reenter owners...
-- client_ms: the caller's wall clock, stored as the time of acquisition (shown by status
-- only). The server's TIME is read only when the queue is involved, where every client
-- must use one clock; a free key costs one call less.
-- floor: a fresh grant first raises the fencing counter to at least this (Redlock; 0 = none).
-- enqueue 2: the attempt pipelined behind a waiter's BLPOP. It may run after its client
-- gave up and left (the server had not yet seen the connection close), so it does nothing
-- at all unless the waiter is still queued, and returns {2}.
-- Returns {1, owner, token, depth, reentered, client_ms, pttl} when granted, else
-- {0, position, waiters, retry_ms, pttl, owner, token, depth, holder, acquired_ms, held_until}
-- (lease fields nil when the lock is free but reserved for the queue head), or {3} when
-- the key has shared or semaphore holders: share.lua decides (nothing changed here), or
-- {-4, holder JSON} when a newer --supersede waiter took the caller's place (see supersede).
local lease, fence, queue, alive, info, unfair, group =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local owner, ttl, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fair, enqueue, liveness = ARGV[4] == '1', ARGV[5] ~= '0', tonumber(ARGV[6])
local wake_prefix, holder = ARGV[7], ARGV[8]
local floor = tonumber(ARGV[9]) or 0
local client_ms = tonumber(ARGV[10])
local priority, superseding = tonumber(ARGV[11]), ARGV[12] == '1'
local FIRST_REENTER = 13
local out = out_of_line(queue, wake_prefix, waiter, ARGV[5])
if out then
  return out
end
-- The common case, a key nobody holds or waits for, costs one call to find out.
local found = redis.call('EXISTS', lease, queue, group)
local busy = found > 0
local current = busy and redis.call('HGET', lease, 'owner') or nil
-- The queue exists when the count is not all the lease's (a lease always has an owner),
-- or the group does (never beside a lease): then several may hold it, share.lua's case.
local queued = found > (current and 1 or 0)
if queued and not current and redis.call('EXISTS', group) == 1 then
  return {3}
end
local now = busy and now_ms() or client_ms

-- Our own lease: an earlier attempt of this very request was granted, but its reply was
-- never read (a wait given up while that attempt was on its way). Claim it, its TTL
-- restarted, so that the caller may count the lease from this attempt.
if current == owner then
  redis.call('PEXPIRE', lease, ttl)
  if waiter ~= '' then
    dequeue(queue, alive, info, wake_prefix, waiter)
  end
  local held = redis.call('HMGET', lease, 'token', 'depth')
  return {1, owner, held[1], held[2], 0, client_ms, ttl}
end

-- Re-entry: one of the caller's owners holds it. The queue does not apply.
if current then
  for i = FIRST_REENTER, #ARGV do
    if ARGV[i] == current then
      local depth = redis.call('HINCRBY', lease, 'depth', 1)
      local pttl = redis.call('PTTL', lease)
      if pttl < ttl then
        redis.call('PEXPIRE', lease, ttl)
        pttl = ttl
      end
      leave_queue(queue, alive, info, waiter)
      return {1, current, redis.call('HGET', lease, 'token'), depth, 1, client_ms, pttl}
    end
  end
end

local head, dropped = nil, 0
if queued then
  head, dropped = prune(queue, alive, info, now, wake_prefix)
end

-- A fresh grant: the lock is free and, when fair, nobody live is ahead of the caller.
if not current and (not fair or not head or head == waiter) then
  if floor > 0 and floor > (tonumber(redis.call('GET', fence)) or 0) then
    redis.call('SET', fence, floor)
  end
  local token = redis.call('INCR', fence)
  redis.call('HSET', lease, 'owner', owner, 'token', token, 'depth', 1, 'holder', holder,
    'acquired_ms', client_ms)
  redis.call('PEXPIRE', lease, ttl)
  if queued and waiter ~= '' then
    dequeue(queue, alive, info, wake_prefix, waiter)
  end
  return {1, owner, token, 1, 0, client_ms, ttl}
end

-- An unfair waiter sleeps on the released channel: releases must publish there for a while.
if not fair then
  redis.call('SET', unfair, 1, 'PX', 2 * liveness)
end

-- Free but reserved for a head that took over from dropped waiters: it may be asleep.
if not current and dropped > 0 then
  wake(wake_prefix, head)
end

-- Not granted: join the line (or refresh our liveness in it).
local position = 0
if fair and enqueue then
  if not redis.call('ZSCORE', queue, waiter) then
    join(queue, info, waiter, priority)
    redis.call('HSET', info, waiter, holder)
    -- The waiter that gave way may have been the head of a free key: the next one goes.
    if superseding and supersede(queue, alive, info, wake_prefix, waiter, holder)
        and not current then
      wake(wake_prefix, redis.call('ZRANGE', queue, 0, 0)[1])
    end
  end
  redis.call('ZADD', alive, now + liveness, waiter)
  -- The queue keys outlive their last waiter by a little, then vanish on their own. They
  -- are created, emptied and given their TTL together, so one stands for the three; the
  -- TTL is pushed back to two liveness windows once less than one is left. A live waiter
  -- refreshes within a heartbeat (shorter than the window), so they never lapse under it.
  if redis.call('PTTL', alive) < liveness then
    for _, k in ipairs({queue, alive, info}) do
      redis.call('PEXPIRE', k, 2 * liveness)
    end
  end
end
local rank = redis.call('ZRANK', queue, waiter)
if rank then
  position = rank + 1
end

-- When to look again if no wake-up message comes: when the lease or the head may expire.
local pttl, retry = -2, -1
if current then
  pttl = redis.call('PTTL', lease)
  if pttl >= 0 then
    retry = pttl + 1
  end
elseif head then
  retry = tonumber(redis.call('ZSCORE', alive, head)) - now + 1
end

local fields = redis.call('HMGET', lease, 'owner', 'token', 'depth', 'holder', 'acquired_ms', 'held_until')
return {0, position, redis.call('ZCARD', queue), retry, pttl, unpack(fields)}
