-- calendarwindow.lua: CalendarWindow, a fixed window aligned to a calendar
-- (days, weeks or months of a time zone) instead of the Unix epoch. Lua
-- knows no time zones: the Go side (Policy.calendarArgs) passes, in place
-- of the limit's period and burst, the start and end (us) of the window
-- holding its host's time plus an hour (remote.skew), e1 < e2. Redis's
-- TIME picks the window a call is in: [e1, e2), or before e1 the one that
-- ends at e1 (its start is not passed: it is taken as e1 less the next
-- window's length, which a month's differs from by up to 3 days; only the
-- fair share uses it, never a count). So Redis's clock is normally in the
-- window whose both ends are known, and before e1 only in the last hour of
-- a window (or with a host ahead of Redis). The host's clock may be up to
-- an hour behind Redis's, or almost a window ahead. A call past e2 (the
-- host more than an hour behind, near a window's end) is an error, not a
-- guess; so is one surely before the window ending e1 began (the host days
-- ahead: a window is at most 3 days longer than the next, plus the hour).
-- Between a window and 3 days ahead is not caught. The key is a hash
--   e  the end of the window the count belongs to
--   c  units granted in that window
--   f  the Redis time (us) of the count's first grant: no grant of the
--      window is older, so a refund of one that is (Settle's, hours
--      later) is of an earlier window, whose start is not passed
-- and expires at that end. State: a = e, b = c, c = f (a stored count of
-- an older window reads as zero, first granted now).
local CW_SLACK = (3 * 86400 + 3600) * 1000000

-- The start and end of the window Redis's time is in.
local function cw_window(e1, e2)
  if NOW >= e1 and NOW < e2 then return e1, e2 end
  if NOW < e1 and NOW >= 2 * e1 - e2 - CW_SLACK then return min(NOW, 2 * e1 - e2), e1 end
  error('ratelease: calendar window ' .. int(e1) .. '-' .. int(e2) ..
    ' does not hold Redis time ' .. int(NOW) .. ': this host\'s clock is far from Redis\'s')
end

local function cw_load(key, _, e1, e2)
  local s, e = cw_window(e1, e2)
  local v = call('HMGET', key, 'e', 'c', 'f')
  -- (A count written before f was kept: from its window's start when it
  -- is known, else from now.)
  if tonumber(v[1]) == e then
    if NOW < e1 then s = NOW end
    return e, tonumber(v[2]) or 0, tonumber(v[3]) or s
  end
  return e, 0, NOW
end

local function cw_save(key, e, c, f)
  call('HSET', key, 'e', int(e), 'c', int(c), 'f', int(f))
  expire_in(key, e - NOW)
end

ALG[5] = {
  load = cw_load,

  avail = function(_, c, _, rate) return max(0, rate - c) end,

  -- Nothing is freed before the window ends.
  retry = function(_, e) return e - NOW end,

  commit = function(key, e, c, f, _, _, _, g)
    cw_save(key, e, c + g, f)
    return e, c + g, f, 0
  end,

  reset = function(e, c)
    if c == 0 then return 0 end
    return e - NOW
  end,

  -- A grant belongs to its window: it lapses at the window's end.
  valid = function(e) return e - NOW end,

  -- Its room comes whole when a window opens.
  whole = true,

  -- The fair share's view (acquire.lua): the window's length stands for a
  -- period, its rate for a capacity.
  span = function(_, _, _, rate, e1, e2)
    local s, e = cw_window(e1, e2)
    return e - s, rate
  end,

  -- Units granted in the current window go back; a window that has ended
  -- is gone: a grant older than the count's first (f) was not of it,
  -- however long ago (Settle's may come days later). From e1 on, the
  -- window's start is known: a grant at or after it is of it (a time an
  -- instance read from its lease may be a little before f).
  refund = function(key, rate, e1, e2, g, at)
    local e, c, f = cw_load(key, rate, e1, e2)
    if c > 0 and (at >= f or NOW >= e1 and at >= e1) then cw_save(key, e, max(0, c - g), f) end
  end,

  -- Forgiven when the window ends.
  owed = function(_, c, _, rate) return max(0, c - rate) end,
}
