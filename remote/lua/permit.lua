-- permit.lua: the permits of a concurrency limit's key (Limiter.AcquirePermit):
-- at most `limit` held at once, each until it is released or its TTL ends
-- (a holder that crashed), on Redis's clock. The key is a sorted set of
-- permit ids scored by when they expire (us); it expires with its last.
--
-- KEYS[1]   the key's permits
-- ARGV[1]   'acquire', 'release' or 'extend'
-- ARGV[2]   the permit's id (random, the caller's)
-- ARGV[3]   limit (acquire)
-- ARGV[4]   ttl, us (acquire, extend)
--
-- Returns { done (1 or 0), now (us), held (after the call), retry_after
-- (us until the first permit held expires, when an acquire is denied; a
-- release frees one sooner), 0 otherwise }: acquire, 1 when granted;
-- release and extend, 1 when the permit was held (0: expired or unknown).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key, op, id = KEYS[1], ARGV[1], ARGV[2]
-- Expired permits (their holder gone) are dropped first.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)

-- The key lives as long as its last permit.
local function keep()
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, string.format('%d', math.max(1, math.ceil((tonumber(last[2]) - now) / 1000))))
  end
end

if op == 'release' then
  local done = redis.call('ZREM', key, id)
  return { done, now, redis.call('ZCARD', key), 0 }
end
local ttl = tonumber(ARGV[4])
if op == 'extend' then
  -- (ZREM then ZADD: the commands the README's ACL allows.)
  if redis.call('ZREM', key, id) == 0 then return { 0, now, redis.call('ZCARD', key), 0 } end
  redis.call('ZADD', key, now + ttl, id)
  keep()
  return { 1, now, redis.call('ZCARD', key), 0 }
end
local held = redis.call('ZCARD', key)
if held >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return { 0, now, held, math.max(1, tonumber(first[2]) - now) }
end
redis.call('ZADD', key, now + ttl, id)
keep()
return { 1, now, held + 1, 0 }
