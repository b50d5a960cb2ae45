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
-- State: tat, the theoretical arrival time (us). The debt d = max(tat - now, 0)
-- is how far the bucket is from full; capacity is cap = ceil(burst*period/rate)
-- us of debt. One unit costs period/rate us; a grant of g units adds
-- ceil(g*period/rate), rounded up so that rounding never admits extra units.
local function gcra_cap(lim) return cdiv(lim.burst * lim.period, lim.rate) end
local function gcra_cost(lim, g) return cdiv(g * lim.period, lim.rate) end
local function gcra_debt(st, now) return math.max(0, st.tat - now) end

-- Units that fit in the room left: floor((cap - d) * rate / period), at most burst.
local function gcra_room(st, lim, now)
  local room = gcra_cap(lim) - gcra_debt(st, now)
  if room <= 0 then return 0 end
  return math.min(lim.burst, idiv(room * lim.rate, lim.period))
end

local function gcra_load(key, lim, now)
  local v = redis.call('GET', key)
  return { tat = v and tonumber(v) or now }
end

-- Charge g units; returns the debt before the charge (how long a queued
-- request waits for its slot).
local function gcra_take(st, lim, now, g)
  local before = gcra_debt(st, now)
  st.tat = math.max(st.tat, now) + gcra_cost(lim, g)
  return before
end

-- The key lives exactly as long as it holds debt: after tat it equals "absent".
local function gcra_save(key, st, lim, now)
  local d = gcra_debt(st, now)
  if d > 0 then
    redis.call('SET', key, int(st.tat), 'PX', int(math.max(1, cdiv(d, 1000))))
  else
    redis.call('DEL', key)
  end
end

-- Give back cost us of debt, never below "full".
local function gcra_refund(key, lim, now, cost)
  local v = redis.call('GET', key)
  if not v then return end
  gcra_save(key, { tat = math.max(tonumber(v) - cost, now) }, lim, now)
end
