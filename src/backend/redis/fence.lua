-- Redlock: raise the fencing counter to at least the token the client settled on, and stamp
-- the caller's lease with it, in one round trip. Raising a counter is always safe (it only
-- goes up), so this runs on servers where the caller holds nothing too.
-- KEYS: lease, fence
-- ARGV: owner, token
-- Returns 1 when the caller holds the lease here (now stamped with the token), else 0.
local lease, fence, owner, token = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
if token > (tonumber(redis.call('GET', fence)) or 0) then
  redis.call('SET', fence, token)
end
if redis.call('HGET', lease, 'owner') == owner then
  redis.call('HSET', lease, 'token', token)
  return 1
end
return 0
