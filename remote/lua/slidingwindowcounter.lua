-- slidingwindowcounter.lua: SlidingWindowCounter, the two-bucket estimate.
-- Windows are aligned as in the fixed window. The count over the sliding
-- period ending now is estimated as
--   c + ceil(p * (period - e) / period)
-- where c counts the current window, p the previous one, and e is the time
-- elapsed in the current window: the previous window's count, weighted by the
-- share of it still inside the sliding period (rounded up: never admits more
-- than the estimate allows). The key is a hash {w, c, p}; it expires when
-- both buckets are behind the sliding period (end of the next window).
-- State: a = w (the current window), b = c, c = p, both as of now.
local function swc_load(key, _, period)
  local w = idiv(NOW, period)
  local v = call('HMGET', key, 'w', 'c', 'p')
  local sw = tonumber(v[1])
  if sw == w then return w, tonumber(v[2]) or 0, tonumber(v[3]) or 0 end
  if sw == w - 1 then return w, 0, tonumber(v[2]) or 0 end -- one window on
  return w, 0, 0                                             -- older, or absent
end

local function swc_save(key, w, c, p, period)
  call('HSET', key, 'w', int(w), 'c', int(c), 'p', int(p))
  expire_in(key, (w + 2) * period - NOW)
end

ALG[3] = {
  load = swc_load,

  avail = function(w, c, p, rate, period)
    local e = NOW - w * period
    return max(0, rate - c - cdiv(p * (period - e), period))
  end,

  retry = function(_, w, c, p, rate, period, _, n)
    local e = NOW - w * period
    local room = rate - c - n
    if room >= 0 then
      -- The current bucket has room: wait until the previous bucket's weight
      -- falls to room, i.e. until e' >= period - floor(room * period / p)
      -- (p > 0 here, or n would fit).
      return max(0, period - idiv(room * period, p)) - e
    end
    -- The current bucket alone is too full: wait for the next window, where
    -- it becomes the previous bucket, then until its weight leaves room for n.
    local later = 0
    if c > 0 then later = max(0, period - idiv((rate - n) * period, c)) end
    return (period - e) + later
  end,

  commit = function(key, w, c, p, _, period, _, g)
    swc_save(key, w, c + g, p, period)
    return w, c + g, p, 0
  end,

  -- Empty once both buckets have slid out of the period.
  reset = function(w, c, p, _, period)
    if c > 0 then return (w + 2) * period - NOW end
    if p > 0 then return (w + 1) * period - NOW end
    return 0
  end,

  owed = function(w, c, p, rate, period)
    local e = NOW - w * period
    return max(0, c + cdiv(p * (period - e), period) - rate)
  end,

  -- Grants of the current window come off c, of the previous window off p.
  -- A grant belongs to the current bucket: it lapses at its end.
  valid = function(w, _, _, _, period) return (w + 1) * period - NOW end,

  refund = function(key, rate, period, _, g, at)
    local w, c, p = swc_load(key, rate, period)
    local wa = idiv(at, period)
    if wa == w and c > 0 then
      swc_save(key, w, max(0, c - g), p, period)
    elseif wa == w - 1 and p > 0 then
      swc_save(key, w, c, max(0, p - g), period)
    end
  end,
}
