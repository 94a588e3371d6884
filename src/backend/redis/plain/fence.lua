-- layout=plain, Redlock: raise dlock's fencing counter beside K to at least the token the
-- client settled on, and stamp the caller's holder hash with it, in one round trip.
-- Raising a counter is always safe (it only goes up), so this runs on servers where the
-- caller holds nothing too.
-- KEYS: 1 the application's key K, 2 dlock's fencing counter, 3 dlock's holder hash.
-- ARGV: 1 owner, 2 token.
-- Returns 1 when the caller holds K here (its hash now stamped with the token), else 0.
local token = tonumber(ARGV[2])
if token > (tonumber(redis.call('GET', KEYS[2])) or 0) then
  redis.call('SET', KEYS[2], token)
end
local ok, value = pcall(redis.call, 'GET', KEYS[1])
if not ok or value ~= ARGV[1] or redis.call('HGET', KEYS[3], 'owner') ~= value then
  return 0
end
redis.call('HSET', KEYS[3], 'token', token)
return 1
