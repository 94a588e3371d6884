-- layout=plain: the state of the application's key K and of dlock's holder hash.
-- KEYS: 1 K, 2 dlock's holder hash.
-- Returns {value or false, pttl, owner, token, depth, holder, acquired_ms, held_until}.
local ok, value = pcall(redis.call, 'GET', KEYS[1])
if not ok then value = '' end
local f = redis.call('HMGET', KEYS[2], 'owner', 'token', 'depth', 'holder', 'acquired_ms', 'held_until')
return {value, redis.call('PTTL', KEYS[1]), f[1], f[2], f[3], f[4], f[5], f[6]}
