-- Leave the caller's lease to expire by itself ttl_ms from now, marked with when, for
-- `status` (exec --hold-at-least: the run finished sooner). Unlike renew it may shorten the
-- lease: the hold ends at acquisition + DUR, not at the end of a TTL renewed during the run.
-- A shared or semaphore holder's place is left the same way.
-- KEYS: lease, then group and ends only when asked again for a holder that has no lease:
-- declaring keys that do not exist would stall the script while a Cluster migrates the slot.
-- ARGV: owner, ttl_ms
-- Returns {1, held_until_ms} when done, {0} when the lease is gone, {-1} when another
-- owner holds it.
local lease, group, ends, owner, ttl = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2])
local shared = #KEYS == 3
local current = redis.call('HGET', lease, 'owner')
if not current then
  if not shared then
    return {0}
  end
  local now = now_ms()
  local m = prune_group(group, ends, now) > 0 and member_get(group, owner)
  if not m then
    return {0}
  end
  m.held_until = string.format('%d', now + ttl)
  member_put(group, owner, m)
  redis.call('ZADD', ends, now + ttl, owner)
  group_expire(group, ends, ttl)
  return {1, now + ttl}
end
if current ~= owner then
  return {-1}
end
local until_ms = now_ms() + ttl
redis.call('HSET', lease, 'held_until', until_ms)
redis.call('PEXPIRE', lease, ttl)
return {1, until_ms}
