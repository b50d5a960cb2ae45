-- slidingwindowlog.lua: SlidingWindowLog, exact. A sorted set holds one member
-- per granted unit, scored by its grant time (us); the sliding period is
-- (now - period, now], and at most rate units may be in it. Members are named
-- "<time>:<seq>" so that units granted in the same microsecond stay distinct.
-- The key expires one period after its newest member. Memory grows with rate.
--
-- Nothing reads the key after this script has written it: Redis may expire
-- a key while a script runs (its TTL can be a millisecond), so what the
-- reply needs after the write is kept in the state table.
-- The score of the member at rank, or nil when there is none (the key may
-- expire while the script runs).
local function swl_score_at(key, rank)
  local r = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  return tonumber(r[2])
end

ALG[2] = {
  -- Drop what slid out of the period, then count and note the newest.
  load = function(key, lim, now)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - lim.period))
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    return { n = redis.call('ZCARD', key), newest = tonumber(newest[2]) }
  end,

  avail = function(st, lim, now, reserve) return math.max(0, lim.rate - st.n) end,

  -- n more fit once the (n + count - rate) oldest members leave: the last of
  -- them, at rank n + count - rate - 1, leaves period after its score.
  -- If the member is gone already (the key expired meanwhile), retry at once.
  retry = function(st, lim, now, n, reserve)
    local s = swl_score_at(st.key, n + st.n - lim.rate - 1)
    if not s then return 1 end
    return s + lim.period - now
  end,

  -- Adding happens in save, which knows the key; take only counts.
  take = function(st, lim, now, g)
    st.add = (st.add or 0) + g
    st.n = st.n + g
    st.newest = now
    return 0
  end,

  save = function(key, st, lim, now)
    local left, seq = st.add or 0, st.n - (st.add or 0)
    while left > 0 do
      -- ZADD NX in chunks (Lua's unpack has a stack limit); a name already
      -- taken (possible only after a refund or a clock step) is skipped and
      -- the loop tries the next sequence number.
      local args = { 'ZADD', key, 'NX' }
      for _ = 1, math.min(left, 500) do
        seq = seq + 1
        args[#args + 1] = int(now)
        args[#args + 1] = string.format('%d:%d', now, seq)
      end
      left = left - redis.call(unpack(args))
    end
    st.add = 0
    expire_in(key, lim.period)
  end,

  -- Empty once the newest member slides out.
  reset = function(st, lim, now)
    if st.n == 0 then return 0 end
    return st.newest + lim.period - now
  end,

  -- Exact: remove up to g of the members granted at time at.
  refund = function(key, lim, now, g, at)
    local names = redis.call('ZRANGEBYSCORE', key, int(at), int(at))
    local args = { 'ZREM', key }
    for i = #names, math.max(1, #names - g + 1), -1 do args[#args + 1] = names[i] end
    if #args > 2 then redis.call(unpack(args)) end
  end,
}
