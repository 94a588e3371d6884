-- Helpers shared by every dlock script (prepended to each one).
--
-- A lock K owns these keys, all with the hash tag {K} so that they share one cluster slot:
--   lease  HASH  owner, token, depth, holder (JSON), acquired_ms (PEXPIRE ttl)
--   fence  STRING  fencing counter (INCR), never deleted nor expired
--   queue  ZSET  waiter id -> its place: -priority * 2^32 + arrival ticket (see join)
--   alive  ZSET  waiter id -> liveness deadline, server ms (a waiter refreshes it as it polls)
--   info   HASH  waiter id -> holder JSON, for `status`; '!' -> the pending --supersede waiter,
--          '#' -> the last arrival ticket (see join)
--   wake:<waiter id>  LIST  a pending wake-up for that waiter (see wake)
--   group  HASH  shared (--shared) or semaphore (--limit N) holders: owner ->
--          "token|depth|acquired_ms|held_until|holder JSON", and '=' -> how they hold it
--          ('s' or N); PEXPIRE = the latest holder's end. Never beside a lease.
--   ends   ZSET  holder owner -> end of its lease (server ms): a dead holder frees its
--          place at its TTL (see prune_group)
-- A waiter's info entry starts with 's|' or 'N|' when it asks to share the key (none: an
-- exclusive waiter), so the line knows what each waiter needs without another key.

-- Server time in milliseconds: one clock for every client. Scripts may read TIME because
-- Redis (5+, and only this way in 7) replicates their effects, not the scripts.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Removes one waiter from the queue; returns 1 when it was queued. The info hash keeps no
-- trace of it: not as the pending --supersede waiter ('!'), and once the line is empty not
-- the arrival ticket ('#', see join) either, which can start again with nobody to pass.
local function leave_queue(queue, alive, info, waiter)
  local n = redis.call('ZREM', queue, waiter)
  redis.call('ZREM', alive, waiter)
  redis.call('HDEL', info, waiter)
  if redis.call('HGET', info, '!') == waiter then
    redis.call('HDEL', info, '!')
  end
  if redis.call('ZCARD', queue) == 0 then
    redis.call('HDEL', info, '#')
  end
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
    if not head then
      -- An empty line keeps no ticket and no pending superseding waiter (see leave_queue).
      redis.call('HDEL', info, '#', '!')
      return nil, dropped
    end
    if redis.call('ZSCORE', alive, head) then
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

-- How the key is shared: 'x' (exclusive), 's' (--shared) or N (--limit N), as a string.
local MODE = '='

-- Drops holders whose lease ended; returns how many hold now (the keys go with the last).
local function prune_group(group, ends, now)
  local dead = redis.call('ZRANGEBYSCORE', ends, '-inf', now, 'LIMIT', 0, 500)
  if #dead > 0 then
    redis.call('HDEL', group, unpack(dead))
    redis.call('ZREM', ends, unpack(dead))
  end
  local n = redis.call('ZCARD', ends)
  if n == 0 then
    redis.call('DEL', group, ends)
  end
  return n
end

-- One holder of a group, or nil.
local function member_get(group, owner)
  local v = redis.call('HGET', group, owner)
  if not v then return nil end
  local token, depth, acquired, held_until, holder =
    string.match(v, '^(%d+)|(%d+)|(%d*)|(%d*)|(.*)$')
  return {token = token, depth = tonumber(depth), acquired = acquired,
    held_until = held_until, holder = holder}
end

local function member_put(group, owner, m)
  redis.call('HSET', group, owner, table.concat({m.token, string.format('%d', m.depth),
    m.acquired, m.held_until, m.holder}, '|'))
end

-- The group's keys live at least ttl_ms more (the last holder's end).
local function group_expire(group, ends, ttl)
  for _, k in ipairs({group, ends}) do
    if redis.call('PTTL', k) < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
  end
end

-- What a waiter asks for, from its info entry (see the header).
local function wants(entry)
  if not entry then return 'x' end
  return string.match(entry, '^([^|%[]+)|') or 'x'
end

-- Sharing::compatible: readers and writers meet, a semaphore only meets its own N.
local function compatible(a, b)
  local ra, rb = a == 'x' or a == 's', b == 'x' or b == 's'
  if ra or rb then return ra and rb end
  return a == b
end

-- Sharing::admit (src/backend/sharing.rs), the one rule: 'admit', 'wait' or 'conflict'.
local function admit(me, held, holders, ahead)
  if held and holders > 0 and not compatible(me, held) then return 'conflict' end
  local count, excl = holders, holders > 0 and held == 'x'
  for _, w in ipairs(ahead) do
    if compatible(me, w) then
      count = count + 1
      excl = excl or w == 'x'
    end
  end
  local room
  if me == 'x' then
    room = count == 0
  elseif me == 's' then
    room = not excl
  else
    room = count < tonumber(me)
  end
  return room and 'admit' or 'wait'
end

-- How the key is held now: its mode and how many hold it (nil, 0 when free).
local function held_by(lease, group, ends, now)
  if redis.call('EXISTS', lease) == 1 then return 'x', 1 end
  local n = prune_group(group, ends, now)
  if n == 0 then return nil, 0 end
  return redis.call('HGET', group, MODE), n
end

-- Wakes the head waiter when it may be admitted now (or must learn that it conflicts):
-- after a shared holder leaves, and after each admission to a group, so that readers
-- queued together come in together, one wake-up after another (no herd).
local function wake_if_fits(queue, alive, info, lease, group, ends, now, wake_prefix)
  if wake_prefix == '' or redis.call('EXISTS', queue) == 0 then return end
  local head = prune(queue, alive, info, now, wake_prefix)
  if not head then return end
  local held, n = held_by(lease, group, ends, now)
  if admit(wants(redis.call('HGET', info, head)), held, n, {}) ~= 'wait' then
    wake(wake_prefix, head)
  end
end

-- The queue's order, written once: higher --priority first, arrival order among equals.
-- One score holds both, -priority * 2^32 + arrival ticket (the CLI keeps |priority| at
-- most 10^6, so the score stays exact in a double); ZRANGE, ZRANK and the head follow it.
-- The ticket counts in the info hash under its own field, so joining costs the same however
-- many wait; it starts again from 1 when the line is empty (leave_queue), with nobody to pass.
local ARRIVALS, TICKETS = 4294967296, '#'
local function join(queue, info, waiter, priority)
  local ticket = redis.call('HINCRBY', info, TICKETS, 1) % ARRIVALS
  redis.call('ZADD', queue, ticket - priority * ARRIVALS, waiter)
end

-- --supersede: the info hash names the pending superseding waiter under this field. A newer
-- one takes it off the queue and leaves it a note beside its wake list, then wakes it: it
-- gives up at once, however it sleeps. Returns true when an older waiter gave way.
local SUPERSEDER, NOTE = '!', '!'
local function supersede(queue, alive, info, wake_prefix, waiter, holder)
  local older = redis.call('HGET', info, SUPERSEDER)
  redis.call('HSET', info, SUPERSEDER, waiter)
  if not older or older == waiter or not redis.call('ZSCORE', queue, older) then
    return false
  end
  dequeue(queue, alive, info, wake_prefix, older)
  redis.call('SET', wake_prefix .. older .. NOTE, holder, 'PX', WAKE_TTL_MS)
  wake(wake_prefix, older)
  return true
end

-- The holder JSON of the waiter that superseded `waiter`, or nil. The note stays until it
-- expires: an answer lost on the way is given again by the next attempt.
local function superseded_by(wake_prefix, waiter)
  if waiter == '' then return nil end
  local by = redis.call('GET', wake_prefix .. waiter .. NOTE)
  return by or nil
end

-- Why an attempt of `waiter` ends before it looks at the key, or nil: superseded by a newer
-- waiter ({-4, its holder}), or asked to stay in line (`stay` = '2') after leaving it ({2}).
local function out_of_line(queue, wake_prefix, waiter, stay)
  local by = superseded_by(wake_prefix, waiter)
  if by then
    return {-4, by}
  end
  if stay == '2' and not redis.call('ZSCORE', queue, waiter) then
    return {2}
  end
  return nil
end
