-- bucket.lua: exact.lua for its commonest call, a policy of one token or
-- leaky bucket asked without reserve (every exact Allow of such a policy,
-- and a cold lease of one). Same KEYS as exact.lua (the bucket's state,
-- the key's block); ARGV:
--
-- ARGV[1]   min, ARGV[2] max: as in acquire.lua
-- ARGV[3..6] the limit: algorithm (0 token, 4 leaky), rate, period, burst
-- then, only when units go back: back and back_at, as in exact.lua
--
-- Returns the decision's first four integers when granted, six when
-- denied, ten when blocked (see prelude.lua), as exact.lua would.
--
-- It is gcra.lua's load, room, commit and until, and tokenbucket.lua's and
-- leakybucket.lua's avail and retry, written out in one piece: a Lua
-- function call costs Redis about as much as the arithmetic of a
-- decision, and this is the script most decisions run. TestExactAgrees-
-- WithAcquire holds it to acquire.lua's generic path. A leaky bucket
-- admits only into an empty queue, and its retry is when the queue has
-- drained.
HEADER = 2
local minimum, maximum = tonumber(ARGV[1]), tonumber(ARGV[2])
local leaky, rate, period, burst = ARGV[3] == '4', tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local key = KEYS[1]

-- What the caller leased earlier and did not use goes back first.
if ARGV[7] then refund_all(1, tonumber(ARGV[7]), tonumber(ARGV[8])) end

do
  local ms = call('PTTL', KEYS[2])
  if ms ~= -2 then
    local left = block_left(ms)
    return reply(0, NOW, 0, left, 0, left, 0, 0, 0, 1)
  end
end

-- The debt D (gcra.lua), read with the rate that wrote it.
local D = 0
local v = call('GET', key)
if v then
  local us, rem, wrote = match(v, '^(%d+):(%d+):?(%d*)$')
  us = tonumber(us)
  if us and us >= NOW then D = (us - NOW) * (tonumber(wrote) or rate) + tonumber(rem) end
end

local cap = burst * period
local av = 0
if D < cap and not (leaky and D > 0) then av = floor((cap - D) / period) end
if av < minimum then
  local reset, fits, retry = 0, 0, 0
  if D > 0 then reset = -floor(-D / rate) end
  if not leaky then fits = (burst - minimum) * period end
  if D > fits then retry = -floor((fits - D) / rate) end
  return format('0 %d %d %d 0 %d', NOW, av, reset, max(1, retry))
end

-- (min is at least 1: the debt is now above 0, and the key is written)
local g = min(av, maximum)
D = min(D + g * period, 9007199254740991)
local us, reset = floor(D / rate), -floor(-D / rate)
call('SET', key, format('%d:%d:%d', NOW + us, D - us * rate, rate), 'PX', format('%d', max(1, -floor(-reset / 1000))))
av = 0
if not leaky and D < cap then av = floor((cap - D) / period) end
return format('%d %d %d %d', g, NOW, av, reset)
