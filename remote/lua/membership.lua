-- membership.lua: one heartbeat of one instance, and the count of the live.
-- Standalone: not assembled with the prelude.
--
-- KEYS[1]   the members' sorted set: member = instance id, score = the Redis
--           time (ms) until which that instance counts as live
-- ARGV[1]   the instance id
-- ARGV[2]   ttl (ms): how long this heartbeat keeps the instance live
-- ARGV[3]   1 to leave (Close) instead of beating
--
-- Returns the number of live instances after this heartbeat (0 or more).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
end
local n = redis.call('ZCARD', KEYS[1])
-- The set lives as long as a member could: it never outlives its use.
if n > 0 then redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl)) end
return n
