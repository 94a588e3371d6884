-- Extend the caller's lease, in one round trip. Never shortens it: a nested holder with a
-- shorter TTL must not cut the lease its parent relies on.
-- KEYS: lease
-- ARGV: owner, ttl_ms
-- Returns {1, token, now_ms, pttl} when renewed, {0} when the lease is gone, {-1} when
-- another owner holds it.
local lease, owner, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local current = redis.call('HMGET', lease, 'owner', 'token')
if not current[1] then
  return {0}
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
