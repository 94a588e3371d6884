-- Leave the caller's lease to expire by itself ttl_ms from now, marked with when, for
-- `status` (exec --hold-at-least: the run finished sooner). Unlike renew it may shorten the
-- lease: the hold ends at acquisition + DUR, not at the end of a TTL renewed during the run.
-- KEYS: lease
-- ARGV: owner, ttl_ms
-- Returns {1, held_until_ms} when done, {0} when the lease is gone, {-1} when another
-- owner holds it.
local lease, owner, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local current = redis.call('HGET', lease, 'owner')
if not current then
  return {0}
end
if current ~= owner then
  return {-1}
end
local until_ms = now_ms() + ttl
redis.call('HSET', lease, 'held_until', until_ms)
redis.call('PEXPIRE', lease, ttl)
return {1, until_ms}
