-- fixedwindow.lua: FixedWindow. Windows are aligned to multiples of period
-- since the Unix epoch; each holds at most rate units. The key is a hash
--   w  index of the window the count belongs to (floor(now / period))
--   c  units granted in that window
-- and expires at the end of its window. State: a = w (the current window),
-- b = its count (a stored count of an older window reads as zero).
-- Known trade-off: up to 2*rate units in a span of one period across a
-- boundary.
local function fw_load(key, _, period)
  local w = idiv(NOW, period)
  local v = call('HMGET', key, 'w', 'c')
  if tonumber(v[1]) == w then return w, tonumber(v[2]) or 0 end
  return w, 0
end

local function fw_save(key, w, c, period)
  call('HSET', key, 'w', int(w), 'c', int(c))
  expire_in(key, (w + 1) * period - NOW)
end

ALG[1] = {
  load = fw_load,

  avail = function(_, c, _, rate) return max(0, rate - c) end,

  -- Nothing is freed before the window ends.
  retry = function(_, w, _, _, _, period) return (w + 1) * period - NOW end,

  commit = function(key, w, c, _, _, period, _, g)
    fw_save(key, w, c + g, period)
    return w, c + g, 0, 0
  end,

  reset = function(w, c, _, _, period)
    if c == 0 then return 0 end
    return (w + 1) * period - NOW
  end,

  -- Units granted in the current window go back; older grants have expired.
  -- A grant belongs to its window: it lapses at the window's end.
  valid = function(w, _, _, _, period) return (w + 1) * period - NOW end,

  -- Forgiven when the window ends.
  owed = function(_, c, _, rate) return max(0, c - rate) end,

  -- Its room comes whole when a window opens (the fair share divides it
  -- into the members' parts of the window: see acquire.lua).
  whole = true,

  refund = function(key, rate, period, _, g, at)
    local w, c = fw_load(key, rate, period)
    if idiv(at, period) == w and c > 0 then fw_save(key, w, max(0, c - g), period) end
  end,
}
