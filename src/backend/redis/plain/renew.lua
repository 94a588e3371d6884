-- layout=plain: compare-and-PEXPIRE, as redis-py's `extend` does.
-- KEYS: 1 the application's key K, 2 dlock's holder hash. ARGV: 1 owner, 2 ttl ms.
-- Returns {1, token, pttl} renewed, {0} gone, {-1} held by another.
local ok, value = pcall(redis.call, 'GET', KEYS[1])
if not ok then return {-1} end
if not value then return {0} end
if value ~= ARGV[1] then return {-1} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {1, redis.call('HGET', KEYS[2], 'token') or '0', redis.call('PTTL', KEYS[1])}
