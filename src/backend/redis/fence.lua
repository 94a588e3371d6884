-- Redlock: raise the fencing counter to at least the token the client settled on, and stamp
-- the caller's lease (or its place among shared or semaphore holders) with it, in one round
-- trip. Raising a counter is always safe (it only goes up), so this runs on servers where
-- the caller holds nothing too.
-- KEYS: lease, fence, group
-- ARGV: owner, token
-- Returns 1 when the caller holds the key here (now stamped with the token), else 0. A
-- place among several holders is not stamped with a token another holder here has: every
-- holder at one time keeps its own token (the counter only goes up, so a fresh grant never
-- repeats one), and the caller's round is then lost and given back.
local lease, fence, group, owner, token = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2])
if token > (tonumber(redis.call('GET', fence)) or 0) then
  redis.call('SET', fence, token)
end
if redis.call('HGET', lease, 'owner') == owner then
  redis.call('HSET', lease, 'token', token)
  return 1
end
local mine = redis.call('HGET', group, owner)
if not mine then return 0 end
local all = redis.call('HGETALL', group)
for i = 1, #all, 2 do
  if all[i] ~= owner and all[i] ~= MODE and tonumber(string.match(all[i + 1], '^(%d+)|')) == token then
    return 0
  end
end
redis.call('HSET', group, owner, token .. string.match(mine, '^%d+(|.*)$'))
return 1
