-- prelude.lua: shared by every script. The Go side concatenates
--   prelude.lua, one file per algorithm, then acquire.lua or refund.lua
-- into one script, so a policy that mixes algorithms is still decided by one
-- atomic call.
--
-- Arithmetic: Lua numbers are doubles. Every value here is a whole number
-- below 2^53 (the Go side rejects limits whose products could exceed it), so
-- sums, products and the floor or ceiling of a quotient are exact.
-- Time is microseconds of Redis TIME; no other clock is read.

local ALG = {} -- algorithm id (remote.Algorithm) -> table of functions, see below

-- floor(a / b) and ceil(a / b) for whole a >= 0 and b > 0, exact below 2^53.
local function idiv(a, b) return math.floor(a / b) end
local function cdiv(a, b) return -math.floor(-a / b) end

-- Numbers go to redis.call formatted by hand: the default conversion keeps
-- only 14 significant digits and would round a microsecond timestamp.
local function int(x) return string.format('%d', x) end

-- Expire key after us microseconds, rounded up to whole milliseconds.
local function expire_in(key, us)
  redis.call('PEXPIRE', key, int(math.max(1, cdiv(us, 1000))))
end

-- Redis TIME in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Parse the limits from ARGV, four values each, starting at ARGV[first]:
-- algorithm id, rate (units per period), period (us), burst (capacity).
local function limits_from(first)
  local lims = {}
  for i = 1, #KEYS do
    local o = first + (i - 1) * 4
    lims[i] = {
      alg = tonumber(ARGV[o]),
      rate = tonumber(ARGV[o + 1]),
      period = tonumber(ARGV[o + 2]),
      burst = tonumber(ARGV[o + 3]),
    }
  end
  return lims
end

-- GCRA helpers, shared by the token bucket and the leaky bucket.
--
-- A bucket is full when its theoretical arrival time (TAT) is not after now;
-- one unit moves the TAT period/rate us later. To keep that exact when rate
-- does not divide period, the debt D (how far the TAT is ahead of now) is
-- counted in units of 1/rate us: one unit costs exactly `period`, and D falls
-- by `rate` every microsecond. A full bucket has D = 0; capacity is
-- burst*period (below 2^53: the Go side checks). The key holds the TAT as
-- "<us>:<remainder>", the remainder in [0, rate): TAT = us + remainder/rate.
local function gcra_load(key, lim, now)
  local v = redis.call('GET', key)
  local D = 0
  if v then
    local us, rem = string.match(v, '^(%d+):(%d+)$')
    us, rem = tonumber(us), tonumber(rem)
    if us and us >= now then D = (us - now) * lim.rate + rem end
  end
  return { D = D }
end

-- Units that fit in the room left: floor((burst*period - D) / period).
local function gcra_room(st, lim)
  return math.max(0, idiv(lim.burst * lim.period - st.D, lim.period))
end

-- us until the debt falls to at most `to` (scaled), rounded up.
local function gcra_until(st, lim, to)
  return math.max(0, cdiv(st.D - to, lim.rate))
end

-- Charge g units; returns the us until the debt before the charge is paid
-- (how long a queued request waits for its slot).
local function gcra_take(st, lim, now, g)
  local before = gcra_until(st, lim, 0)
  st.D = st.D + g * lim.period
  return before
end

-- The key lives exactly as long as it holds debt: after that it equals "absent".
local function gcra_save(key, st, lim, now)
  if st.D <= 0 then
    redis.call('DEL', key)
    return
  end
  local us = idiv(st.D, lim.rate)
  local v = string.format('%d:%d', now + us, st.D - us * lim.rate)
  redis.call('SET', key, v, 'PX', int(math.max(1, cdiv(cdiv(st.D, lim.rate), 1000))))
end

-- Give back g units exactly, never below "full".
local function gcra_refund(key, lim, now, g)
  local st = gcra_load(key, lim, now)
  if st.D == 0 then return end
  st.D = math.max(0, st.D - g * lim.period)
  gcra_save(key, st, lim, now)
end
