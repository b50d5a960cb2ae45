-- gcra.lua: GCRA helpers, shared by the token bucket and the leaky bucket.
--
-- A bucket is full when its theoretical arrival time (TAT) is not after now;
-- one unit moves the TAT period/rate us later. To keep that exact when rate
-- does not divide period, the debt D (how far the TAT is ahead of now) is
-- counted in units of 1/rate us: one unit costs exactly `period`, and D falls
-- by `rate` every microsecond. A full bucket has D = 0; capacity is
-- burst*period (below 2^53: the Go side checks). The key holds the TAT as
-- "<us>:<remainder>:<rate>", the remainder in [0, rate): TAT = us +
-- remainder/rate, for the rate that wrote it. It expires when the debt is
-- paid, since then it equals "absent".
--
-- D/period is the units outstanding, whatever the rate: a policy redefined
-- under its name with another rate or burst (a config reload) carries its
-- usage over in units. D is read with the rate that wrote it (the usage
-- fell at that rate until now) and saved with the caller's.

local function gcra_load(key, rate)
  local v = call('GET', key)
  if not v then return 0 end
  local us, rem, wrote = match(v, '^(%d+):(%d+):?(%d*)$')
  us = tonumber(us)
  if not us or us < NOW then return 0 end
  -- (a state written before the rate was kept has none: the caller's)
  return (us - NOW) * (tonumber(wrote) or rate) + tonumber(rem)
end

-- Units that fit in the room left: floor((burst*period - D) / period).
local function gcra_room(D, period, burst)
  if D >= burst * period then return 0 end
  return floor((burst * period - D) / period)
end

-- us until the debt falls to at most `to`, rounded up.
local function gcra_until(D, rate, to)
  if D <= to then return 0 end
  return -floor((to - D) / rate)
end

local function gcra_save(key, D, rate)
  if D <= 0 then
    call('DEL', key)
    return
  end
  local us = idiv(D, rate)
  call('SET', key, format('%d:%d:%d', NOW + us, D - us * rate, rate),
    'PX', int(max(1, cdiv(cdiv(D, rate), 1000))))
end

-- Units owed beyond a capacity of burst units (charge.lua).
local function gcra_owed(D, period, burst)
  if D <= burst * period then return 0 end
  return cdiv(D - burst * period, period)
end

-- Charge g units. Returns the new debt and the us until the old debt is paid
-- (how long a queued request waits for its slot). The debt stops at 2^53 - 1,
-- the most it holds exactly: only a charge past the limits (charge.lua) can
-- take it there.
local function gcra_commit(key, D, rate, period, g)
  local wait = gcra_until(D, rate, 0)
  D = min(D + g * period, 9007199254740991)
  gcra_save(key, D, rate)
  return D, wait
end

-- Give g units back exactly, never below "full".
local function gcra_refund(key, rate, period, g)
  local D = gcra_load(key, rate)
  if D > 0 then gcra_save(key, max(0, D - g * period), rate) end
end

-- Give back g units granted at time `at` (us) and never used, less what the
-- bucket refilled since: had they stayed in the bucket, as much of them as
-- that could have overflowed a full bucket meanwhile. Units held outside the
-- bucket must not come back as capacity beyond it, or a late refund would
-- let a window admit more than burst + rate*(w + TTL).
local function gcra_refund_aged(key, rate, period, g, at)
  local elapsed = max(0, NOW - at)
  if elapsed * rate >= g * period then return end
  local D = gcra_load(key, rate)
  if D > 0 then gcra_save(key, max(0, D - (g * period - elapsed * rate)), rate) end
end
