-- Extend the caller's lease, in one round trip. Never shortens it: a nested holder with a
-- shorter TTL must not cut the lease its parent relies on.
-- A shared or semaphore holder's place is extended the same way.
-- KEYS: lease, then group and ends only when asked again for a holder that has no lease:
-- declaring keys that do not exist would stall the script while a Cluster migrates the slot.
-- ARGV: owner, ttl_ms
-- Returns {1, token, now_ms, pttl} when renewed, {0} when the lease is gone, {-1} when
-- another owner holds it.
local lease, group, ends, owner, ttl = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2])
local shared = #KEYS == 3
local current = redis.call('HMGET', lease, 'owner', 'token')
if not current[1] then
  if not shared then
    return {0}
  end
  local now = now_ms()
  local m = prune_group(group, ends, now) > 0 and member_get(group, owner)
  if not m then
    return {0}
  end
  local left = tonumber(redis.call('ZSCORE', ends, owner)) - now
  if left < ttl then
    redis.call('ZADD', ends, now + ttl, owner)
    group_expire(group, ends, ttl)
    left = ttl
  end
  return {1, m.token, now, left}
end
if current[1] ~= owner then
  return {-1}
end
local pttl = redis.call('PTTL', lease)
if pttl < ttl then
  redis.call('PEXPIRE', lease, ttl)
  pttl = ttl
end
return {1, current[2], now_ms(), pttl}
