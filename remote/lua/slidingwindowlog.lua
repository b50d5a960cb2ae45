-- slidingwindowlog.lua: SlidingWindowLog, exact. A sorted set holds one member
-- per granted unit, scored by its grant time (us); the sliding period is
-- (now - period, now], and at most rate units may be in it. Members are named
-- "<time>:<seq>" so that units granted in the same microsecond stay distinct.
-- The key expires one period after its newest member. Memory grows with rate.
-- State: a = the count in the period, b = the newest member's time.

-- Add g members at NOW, named after seq+1, seq+2, ...; a name already taken
-- (possible only after a refund or a clock step) is skipped for the next.
local function swl_add(key, seq, g)
  local now = int(NOW)
  while g > 0 do
    if g == 1 then
      seq = seq + 1
      g = g - redis.call('ZADD', key, 'NX', now, now .. ':' .. int(seq))
    else
      -- In chunks: Lua's unpack has a stack limit.
      local args = { 'ZADD', key, 'NX' }
      for _ = 1, math.min(g, 500) do
        seq = seq + 1
        args[#args + 1] = now
        args[#args + 1] = now .. ':' .. int(seq)
      end
      g = g - redis.call(unpack(args))
    end
  end
end

ALG[2] = {
  -- Drop what slid out of the period, then count and note the newest.
  load = function(key, _, period)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(NOW - period))
    local n = redis.call('ZCARD', key)
    if n == 0 then return 0, 0 end
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    return n, tonumber(newest[2]) or NOW
  end,

  avail = function(n, _, _, rate) return math.max(0, rate - n) end,

  -- n more fit once the (n + count - rate) oldest members leave: the last of
  -- them, at rank n + count - rate - 1, leaves one period after its score.
  -- If it is gone already (the key expired meanwhile), retry at once.
  retry = function(key, count, _, _, rate, period, _, n)
    local r = redis.call('ZRANGE', key, n + count - rate - 1, n + count - rate - 1, 'WITHSCORES')
    local s = tonumber(r[2])
    if not s then return 1 end
    return s + period - NOW
  end,

  commit = function(key, n, _, _, _, period, _, g)
    swl_add(key, n, g)
    expire_in(key, period)
    return n + g, NOW, 0, 0
  end,

  -- Empty once the newest member slides out.
  reset = function(n, newest, _, _, period)
    if n == 0 then return 0 end
    return newest + period - NOW
  end,

  -- Exact: remove up to g of the members granted at time at.
  -- Never leased (exact by choice): no limit.
  valid = function() return -1 end,

  refund = function(key, _, _, _, g, at)
    local names = redis.call('ZRANGEBYSCORE', key, int(at), int(at))
    local args = { 'ZREM', key }
    for i = #names, math.max(1, #names - g + 1), -1 do args[#args + 1] = names[i] end
    if #args > 2 then redis.call(unpack(args)) end
  end,
}
