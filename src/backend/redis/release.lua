-- Release (one level, all levels, or by force), in one round trip. A deletion wakes the
-- head waiter (fair waiters) and publishes on the released channel (unfair waiters).
-- A shared or semaphore holder (not the lease's owner) leaves its place in the group the
-- same way; a forced release frees every holder.
-- The record of the holder's run, when given, is written first, whatever the release
-- finds: it comes before the next holder's, and costs no round trip of its own.
-- KEYS: lease, queue, alive, info, unfair, group, ends, last run, last success
-- ARGV: owner, mode (one/all/force), wake_prefix, released_channel (both empty: tell no one,
--       as when Redlock takes back a grant that did not make a majority), run record
--       (empty: none), its TTL in ms, '1' when the run succeeded
-- Returns {1, previous_owner, still_held}, {0} when free (force), {-1} when the lease is
-- gone, {-2} when another owner holds it.
local lease, queue, alive, info, unfair, group, ends =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local owner, mode, wake_prefix, released = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if ARGV[5] ~= '' then
  redis.call('SET', KEYS[8], ARGV[5], 'PX', ARGV[6])
  if ARGV[7] == '1' then
    redis.call('SET', KEYS[9], ARGV[5], 'PX', ARGV[6])
  end
end

-- Release from the group (a lease and a group never exist together).
local function release_shared()
  local now = now_ms()
  local previous
  if prune_group(group, ends, now) == 0 then
    return mode == 'force' and {0} or {-1}
  end
  if mode == 'force' then
    previous = table.concat(redis.call('ZRANGE', ends, 0, -1), ', ')
    redis.call('DEL', group, ends)
  else
    local m = member_get(group, owner)
    if not m then
      return {-1}
    end
    if mode == 'one' and m.depth > 1 then
      m.depth = m.depth - 1
      member_put(group, owner, m)
      return {1, owner, 1}
    end
    redis.call('HDEL', group, owner)
    redis.call('ZREM', ends, owner)
    prune_group(group, ends, now)
    previous = owner
  end
  if released ~= '' then
    wake_if_fits(queue, alive, info, lease, group, ends, now, wake_prefix)
    if redis.call('EXISTS', unfair) == 1 then
      redis.call('PUBLISH', released, 'free')
    end
  end
  return {1, previous, 0}
end

local current = redis.call('HMGET', lease, 'owner', 'depth')
if not current[1] then
  return release_shared()
end
if mode ~= 'force' and current[1] ~= owner then
  return {-2}
end
if mode == 'one' and tonumber(current[2]) > 1 then
  redis.call('HINCRBY', lease, 'depth', -1)
  return {1, current[1], 1}
end
redis.call('DEL', lease)
-- Nobody waiting, fair or unfair (the common case), costs one call to find out.
local waiting = released ~= '' and redis.call('EXISTS', queue, unfair) or 0
if waiting > 0 then
  local queued = redis.call('EXISTS', queue)
  if queued == 1 then
    local head = prune(queue, alive, info, now_ms(), wake_prefix)
    wake(wake_prefix, head)
  end
  if waiting > queued then -- the unfair marker is the other one
    redis.call('PUBLISH', released, 'free')
  end
end
return {1, current[1], 0}
