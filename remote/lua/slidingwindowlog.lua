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
      g = g - call('ZADD', key, 'NX', now, now .. ':' .. int(seq))
    else
      -- In chunks: Lua's unpack has a stack limit.
      local args = { 'ZADD', key, 'NX' }
      for _ = 1, min(g, 500) do
        seq = seq + 1
        args[#args + 1] = now
        args[#args + 1] = now .. ':' .. int(seq)
      end
      g = g - call(unpack(args))
    end
  end
end

-- Members that slid out of the period are dropped at most TRIM at a time:
-- a log of a million units that all slid out together would otherwise be
-- one ZREMRANGEBYSCORE of a million members, a second of Redis's time. The
-- rest go in later calls, or with the key, which expires a period after its
-- newest member; until then they are not counted (ZCOUNT).
local TRIM = 2000

ALG[2] = {
  -- Drop (some of) what slid out of the period, then count what is in it
  -- and note the newest. c: the members left below the period, which
  -- shift ranks.
  load = function(key, _, period)
    local edge = int(NOW - period)
    local old = call('ZCOUNT', key, '-inf', edge)
    if old > 0 then
      call('ZREMRANGEBYRANK', key, 0, min(old, TRIM) - 1)
      old = old - min(old, TRIM)
    end
    local n = call('ZCARD', key) - old
    if n == 0 then return 0, 0, old end
    local newest = call('ZRANGE', key, -1, -1, 'WITHSCORES')
    return n, tonumber(newest[2]) or NOW, old
  end,

  avail = function(n, _, _, rate) return max(0, rate - n) end,

  -- n more fit once the (n + count - rate) oldest members leave: the last of
  -- them, at rank n + count - rate - 1, leaves one period after its score.
  -- If it is gone already (the key expired meanwhile), retry at once.
  retry = function(key, count, _, old, rate, period, _, n)
    local rank = old + n + count - rate - 1
    local r = call('ZRANGE', key, rank, rank, 'WITHSCORES')
    local s = tonumber(r[2])
    if not s then return 1 end
    return s + period - NOW
  end,

  commit = function(key, n, _, old, _, period, _, g)
    -- (Names follow the members' count, old ones included: a name taken
    -- already is skipped.)
    swl_add(key, n + old, g)
    expire_in(key, period)
    return n + g, NOW, old, 0
  end,

  owed = function(n, _, _, rate) return max(0, n - rate) end,

  -- Empty once the newest member slides out.
  reset = function(n, newest, _, _, period)
    if n == 0 then return 0 end
    return newest + period - NOW
  end,

  -- Exact: remove up to g of the members granted at time at.
  -- Never leased (exact by choice): no limit.
  valid = function() return -1 end,

  refund = function(key, _, _, _, g, at)
    local names = call('ZRANGEBYSCORE', key, int(at), int(at))
    local args = { 'ZREM', key }
    for i = #names, max(1, #names - g + 1), -1 do args[#args + 1] = names[i] end
    if #args > 2 then call(unpack(args)) end
  end,
}
