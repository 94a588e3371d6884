-- layout=plain: one attempt on the application's lock key, as redis-py's Lock and node's
-- redlock take it (`SET K token NX PX ttl`).
-- KEYS: 1 the application's key K, 2 dlock's fencing counter, 3 dlock's holder hash
--       (both named to share K's cluster slot; see keys.rs).
-- ARGV: 1 owner (the token stored under K), 2 ttl ms, 3 holder JSON, 4 acquired ms,
--       5 floor (Redlock: the counter is raised to it before the INCR; 0 on one server),
--       6.. owners this caller may re-enter for.
-- Returns {1, token} granted, {2, token, owner} re-entered,
--         {0, value, pttl, owner, token, depth, holder, acquired_ms, held_until} busy.
local ok, value = pcall(redis.call, 'GET', KEYS[1])
if not ok then
  -- K holds something other than a string: no lock of ours, and never ours to touch.
  return {0, '', redis.call('PTTL', KEYS[1])}
end
if value then
  local owner = redis.call('HGET', KEYS[3], 'owner')
  if owner == value then
    for i = 6, #ARGV do
      if ARGV[i] == value then
        redis.call('HINCRBY', KEYS[3], 'depth', 1)
        return {2, redis.call('HGET', KEYS[3], 'token'), value}
      end
    end
  end
  local f = redis.call('HMGET', KEYS[3], 'owner', 'token', 'depth', 'holder', 'acquired_ms', 'held_until')
  return {0, value, redis.call('PTTL', KEYS[1]), f[1], f[2], f[3], f[4], f[5], f[6]}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if tonumber(ARGV[5]) > (tonumber(redis.call('GET', KEYS[2])) or 0) then
  redis.call('SET', KEYS[2], ARGV[5])
end
local token = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'owner', ARGV[1], 'token', token, 'depth', 1, 'holder', ARGV[3],
  'acquired_ms', ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, token}
