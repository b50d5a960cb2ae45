-- slidingwindowcounter.lua: SlidingWindowCounter, the two-bucket estimate.
-- Windows are aligned as in the fixed window. The count over the sliding
-- period ending now is estimated as
--   c + ceil(p * (period - e) / period)
-- where c counts the current window, p the previous one, and e is the time
-- elapsed in the current window: the previous window's count, weighted by the
-- share of it still inside the sliding period (rounded up: never admits more
-- than the estimate allows). State: a hash {w, c, p}; it expires when both
-- buckets are behind the sliding period (end of the next window).
local function swc_weight(st, lim)
  return cdiv(st.p * (lim.period - st.e), lim.period)
end

ALG[3] = {
  load = function(key, lim, now)
    local w = idiv(now, lim.period)
    local v = redis.call('HMGET', key, 'w', 'c', 'p')
    local sw, c, p = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
    if sw == w - 1 then -- one window on: the current bucket became the previous one
      p, c = c, 0
    elseif sw ~= w then -- older (or absent): both buckets are empty
      p, c = 0, 0
    end
    return { w = w, c = c, p = p, e = now - w * lim.period }
  end,

  avail = function(st, lim, now, reserve)
    return math.max(0, lim.rate - st.c - swc_weight(st, lim))
  end,

  retry = function(st, lim, now, n, reserve)
    local P = lim.period
    local room = lim.rate - st.c - n
    if room >= 0 then
      -- The current bucket has room: wait until the previous bucket's weight
      -- falls to room, i.e. until e' >= P - floor(room * P / p) (p > 0 here).
      return math.max(0, P - idiv(room * P, st.p)) - st.e
    end
    -- The current bucket alone is too full: wait for the next window, where it
    -- becomes the previous bucket, then until its weight leaves room for n.
    local later = 0
    if st.c > 0 then later = math.max(0, P - idiv((lim.rate - n) * P, st.c)) end
    return (P - st.e) + later
  end,

  take = function(st, lim, now, g) st.c = st.c + g; return 0 end,

  save = function(key, st, lim, now)
    redis.call('HSET', key, 'w', int(st.w), 'c', int(st.c), 'p', int(st.p))
    expire_in(key, 2 * lim.period - st.e)
  end,

  -- Empty once both buckets have slid out of the period.
  reset = function(st, lim, now)
    if st.c > 0 then return 2 * lim.period - st.e end
    if st.p > 0 then return lim.period - st.e end
    return 0
  end,

  -- Grants of the current window come off c, of the previous window off p.
  refund = function(key, lim, now, g, at)
    local st = ALG[3].load(key, lim, now)
    local wa = idiv(at, lim.period)
    if wa == st.w then
      st.c = math.max(0, st.c - g)
    elseif wa == st.w - 1 then
      st.p = math.max(0, st.p - g)
    else
      return
    end
    ALG[3].save(key, st, lim, now)
  end,
}
