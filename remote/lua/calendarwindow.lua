-- calendarwindow.lua: CalendarWindow, a fixed window aligned to a calendar
-- (days, weeks or months of a time zone) instead of the Unix epoch. Lua
-- knows no time zones: the Go side (Policy.calendarArgs) passes, in place
-- of the limit's period and burst, the ends (us) of two windows, e1 < e2:
-- the window holding its host's time less an hour (remote.skew), and the
-- next. Redis's TIME picks the one a call is in: before e1 the first, else
-- the second. So the host's clock may be up to an hour ahead of Redis's,
-- or almost a window behind. A call past e2 (the host a window behind) is
-- an error, not a guess; so is one surely before e1's window began (the
-- host days ahead: a window is at most 3 days longer than the next, plus
-- the hour). Between an hour and 3 days ahead is not caught: the script
-- knows no window's start. The key is a hash
--   e  the end of the window the count belongs to
--   c  units granted in that window
-- and expires at that end. State: a = e, b = c (a stored count of an
-- older window reads as zero).
local CW_SLACK = (3 * 86400 + 3600) * 1000000

local function cw_end(e1, e2)
  if NOW < e1 and NOW >= 2 * e1 - e2 - CW_SLACK then return e1 end
  if NOW >= e1 and NOW < e2 then return e2 end
  error('ratelease: calendar window ends ' .. int(e1) .. ', ' .. int(e2) ..
    ' do not hold Redis time ' .. int(NOW) .. ': this host\'s clock is far from Redis\'s')
end

local function cw_load(key, _, e1, e2)
  local e = cw_end(e1, e2)
  local v = redis.call('HMGET', key, 'e', 'c')
  if tonumber(v[1]) == e then return e, tonumber(v[2]) or 0 end
  return e, 0
end

local function cw_save(key, e, c)
  redis.call('HSET', key, 'e', int(e), 'c', int(c))
  expire_in(key, e - NOW)
end

ALG[5] = {
  load = cw_load,

  avail = function(_, c, _, rate) return math.max(0, rate - c) end,

  -- Nothing is freed before the window ends.
  retry = function(_, e) return e - NOW end,

  commit = function(key, e, c, _, _, _, _, g)
    cw_save(key, e, c + g)
    return e, c + g, 0, 0
  end,

  reset = function(e, c)
    if c == 0 then return 0 end
    return e - NOW
  end,

  -- A grant belongs to its window: it lapses at the window's end.
  valid = function(e) return e - NOW end,

  -- Its room comes whole when a window opens.
  whole = true,

  -- Units granted in the current window go back; a window that has ended
  -- is gone. (A grant made before e1's window began is taken for one of
  -- it: the script knows no window's start. Refunds follow their grants
  -- within a call's timeout, so at most those of a grant made just before
  -- a boundary go to the window after it.)
  refund = function(key, rate, e1, e2, g, at)
    local e, c = cw_load(key, rate, e1, e2)
    local ea = e1
    if at >= e1 then ea = e2 end
    if ea == e and c > 0 then cw_save(key, e, math.max(0, c - g)) end
  end,

  -- Forgiven when the window ends.
  owed = function(_, c, _, rate) return math.max(0, c - rate) end,
}
