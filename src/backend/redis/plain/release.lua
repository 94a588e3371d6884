-- layout=plain: compare-and-delete, as redis-py's and node redlock's release do.
-- KEYS: 1 the application's key K, 2 dlock's holder hash. ARGV: 1 owner, 2 one|all|force.
-- Returns {1, previous owner, still held 0|1} released, {0} K is free, {-2} K is held by
-- another (or holds something other than a string: never deleted, not even by force).
local ok, value = pcall(redis.call, 'GET', KEYS[1])
if not ok then return {-2} end
if not value then return {0} end
if ARGV[2] ~= 'force' and value ~= ARGV[1] then return {-2} end
local ours = redis.call('HGET', KEYS[2], 'owner') == value
if ARGV[2] == 'one' and ours and redis.call('HINCRBY', KEYS[2], 'depth', -1) > 0 then
  return {1, value, 1}
end
redis.call('DEL', KEYS[1])
if ours then redis.call('DEL', KEYS[2]) end
return {1, value, 0}
