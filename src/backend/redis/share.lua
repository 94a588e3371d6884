-- Acquire as a shared holder (--shared), as one of a semaphore's N (--limit N), or
-- exclusively while the key has such holders (acquire.lua hands those over): every
-- admission where several may hold one key, by the rule of src/backend/sharing.rs.
-- KEYS: lease, fence, queue, alive, info, unfair, group, ends
-- ARGV: owner, ttl_ms, waiter, fair (0/1), enqueue (0/1/2), liveness_ms, wake_prefix,
--       holder (JSON), sharing ('x', 's' or N), client_ms, priority, supersede (0/1),
--       reenter owners...
-- Returns what acquire.lua returns, or {-3, mode} when the key is held in a way this
-- caller must not join nor wait for (a semaphore of another N, or rw beside a semaphore).
local lease, fence, queue, alive, info, unfair, group, ends =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local owner, ttl, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fair, enqueue, liveness = ARGV[4] == '1', ARGV[5] ~= '0', tonumber(ARGV[6])
local wake_prefix, holder, me, client_ms = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local priority, superseding = tonumber(ARGV[11]), ARGV[12] == '1'
local FIRST_REENTER = 13
local out = out_of_line(queue, wake_prefix, waiter, ARGV[5])
if out then
  return out
end
local now = now_ms()
local members = prune_group(group, ends, now)

-- The lease or place of `who`: claimed again (an earlier attempt of this request was
-- granted but its reply never read), or re-entered (a nested run of its holder).
local function hold_again(who, claim)
  if redis.call('HGET', lease, 'owner') == who then
    local depth = claim and redis.call('HGET', lease, 'depth') or
      redis.call('HINCRBY', lease, 'depth', 1)
    local pttl = redis.call('PTTL', lease)
    if claim or pttl < ttl then
      redis.call('PEXPIRE', lease, ttl)
      pttl = ttl
    end
    return {1, who, redis.call('HGET', lease, 'token'), depth, claim and 0 or 1, client_ms, pttl}
  end
  local m = members > 0 and member_get(group, who)
  if not m then return nil end
  if not claim then
    m.depth = m.depth + 1
    member_put(group, who, m)
  end
  local left = tonumber(redis.call('ZSCORE', ends, who)) - now
  if claim or left < ttl then
    redis.call('ZADD', ends, now + ttl, who)
    group_expire(group, ends, ttl)
    left = ttl
  end
  return {1, who, m.token, m.depth, claim and 0 or 1, client_ms, left}
end

local again = hold_again(owner, true)
for i = FIRST_REENTER, #ARGV do
  if again then break end
  again = hold_again(ARGV[i], false)
end
if again then
  if waiter ~= '' then
    dequeue(queue, alive, info, wake_prefix, waiter)
  end
  return again
end

local held, holders = held_by(lease, group, ends, now)
local head, dropped = nil, 0
if redis.call('EXISTS', queue) == 1 then
  head, dropped = prune(queue, alive, info, now, wake_prefix)
end

-- First come, first served: the waiters ahead count as if admitted (none when unfair).
local ahead = {}
if fair and head then
  local rank = redis.call('ZRANK', queue, waiter)
  local ids = {}
  if not rank then
    ids = redis.call('ZRANGE', queue, 0, -1)
  elseif rank > 0 then
    ids = redis.call('ZRANGE', queue, 0, rank - 1)
  end
  if #ids > 0 then
    local entries = redis.call('HMGET', info, unpack(ids))
    for i = 1, #ids do
      ahead[i] = wants(entries[i])
    end
  end
end

local verdict = admit(me, held, holders, ahead)
if verdict == 'conflict' then
  if waiter ~= '' then
    dequeue(queue, alive, info, wake_prefix, waiter)
  end
  return {-3, held}
end

if verdict == 'admit' then
  local token = redis.call('INCR', fence)
  if me == 'x' then
    redis.call('HSET', lease, 'owner', owner, 'token', token, 'depth', 1, 'holder', holder,
      'acquired_ms', client_ms)
    redis.call('PEXPIRE', lease, ttl)
  else
    member_put(group, owner, {token = token, depth = 1, acquired = client_ms,
      held_until = '', holder = holder})
    redis.call('HSET', group, MODE, me)
    redis.call('ZADD', ends, now + ttl, owner)
    group_expire(group, ends, ttl)
  end
  if head and waiter ~= '' then
    dequeue(queue, alive, info, wake_prefix, waiter)
  end
  if me ~= 'x' then
    wake_if_fits(queue, alive, info, lease, group, ends, now, wake_prefix)
  end
  return {1, owner, token, 1, 0, client_ms, ttl}
end

-- Not admitted.
if not fair then
  redis.call('SET', unfair, 1, 'PX', 2 * liveness)
end
if holders == 0 and dropped > 0 then
  wake(wake_prefix, head)
end
if fair and enqueue then
  if not redis.call('ZSCORE', queue, waiter) then
    join(queue, info, waiter, priority)
    redis.call('HSET', info, waiter, me == 'x' and holder or (me .. '|' .. holder))
    if superseding and supersede(queue, alive, info, wake_prefix, waiter, holder) then
      wake_if_fits(queue, alive, info, lease, group, ends, now, wake_prefix)
    end
  end
  redis.call('ZADD', alive, now + liveness, waiter)
  if redis.call('PTTL', alive) < liveness then
    for _, k in ipairs({queue, alive, info}) do
      redis.call('PEXPIRE', k, 2 * liveness)
    end
  end
end
local position = 0
local rank = redis.call('ZRANK', queue, waiter)
if rank then
  position = rank + 1
end

-- The holder that may leave first stands for them all; look again when it may.
local pttl, retry = -2, -1
local fields
if held == 'x' then
  pttl = redis.call('PTTL', lease)
  fields = redis.call('HMGET', lease, 'owner', 'token', 'depth', 'holder', 'acquired_ms',
    'held_until')
elseif holders > 0 then
  local first = redis.call('ZRANGE', ends, 0, 0, 'WITHSCORES')
  local m = member_get(group, first[1])
  pttl = tonumber(first[2]) - now
  fields = {first[1], m.token, tostring(m.depth), m.holder, m.acquired, m.held_until ~= '' and m.held_until or false}
else
  fields = {false, false, false, false, false, false}
end
if pttl >= 0 then
  retry = pttl + 1
elseif head then
  retry = tonumber(redis.call('ZSCORE', alive, head)) - now + 1
end
return {0, position, redis.call('ZCARD', queue), retry, pttl, unpack(fields)}
