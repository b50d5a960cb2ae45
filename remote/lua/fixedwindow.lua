-- fixedwindow.lua: FixedWindow. Windows are aligned to multiples of period
-- since the Unix epoch; each holds at most rate units. State: a hash
--   w  index of the window the count belongs to (floor(now / period))
--   c  units granted in that window
-- A count from an older window reads as zero. The key expires at the end of
-- its window. Known trade-off: up to 2*rate units in a span of one period
-- across a boundary.
ALG[1] = {
  load = function(key, lim, now)
    local w = idiv(now, lim.period)
    local v = redis.call('HMGET', key, 'w', 'c')
    local c = 0
    if tonumber(v[1]) == w then c = tonumber(v[2]) or 0 end
    return { w = w, c = c }
  end,

  avail = function(st, lim, now, reserve) return math.max(0, lim.rate - st.c) end,

  -- Nothing is freed before the window ends.
  retry = function(st, lim, now, n, reserve) return (st.w + 1) * lim.period - now end,

  take = function(st, lim, now, g) st.c = st.c + g; return 0 end,

  save = function(key, st, lim, now)
    redis.call('HSET', key, 'w', int(st.w), 'c', int(st.c))
    expire_in(key, (st.w + 1) * lim.period - now)
  end,

  reset = function(st, lim, now)
    if st.c == 0 then return 0 end
    return (st.w + 1) * lim.period - now
  end,

  -- Units granted in the current window go back; older grants have expired.
  refund = function(key, lim, now, g, at)
    local st = ALG[1].load(key, lim, now)
    if idiv(at, lim.period) ~= st.w or st.c == 0 then return end
    st.c = math.max(0, st.c - g)
    ALG[1].save(key, st, lim, now)
  end,
}
