-- refund.lua: give back units granted by acquire.lua and not used.
--
-- KEYS[i]   as in acquire.lua
-- ARGV[1]   units to give back
-- ARGV[2]   the grant's time, us (acquire's `now`): window algorithms refund
--           only into the window the units were granted in, the log removes
--           exactly the members of that grant, and the token bucket takes
--           back only what could not have overflowed it since
-- ARGV[3-4] unused (keep the limits at the same place as in acquire.lua)
-- ARGV[5..] the limits, as in acquire.lua
--
-- A refund never raises any limit above its capacity. Returns the Redis time.
local units, at = tonumber(ARGV[1]), tonumber(ARGV[2])
if units > 0 then
  for i = 1, #KEYS do
    local alg, rate, period, burst = limit(i)
    ALG[alg].refund(KEYS[i], rate, period, burst, units, at)
  end
end
return NOW
