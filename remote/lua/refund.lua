-- refund.lua: give back units granted by acquire.lua and not used.
--
-- KEYS[i]   as in acquire.lua
-- ARGV[1]   units to give back
-- ARGV[2]   the grant's time, us (acquire's `now`): window algorithms refund
--           only into the window the units were granted in, the log removes
--           exactly the members of that grant, and the token bucket takes
--           back only what could not have overflowed it since
-- ARGV[3]   member: an instance id that leaves the key's members (the
--           members hash is then the last of KEYS), or ''
-- ARGV[4-8] unused (keep the limits at the same place as in acquire.lua)
-- ARGV[9..] the limits, as in acquire.lua
--
-- A refund never raises any limit above its capacity. Returns the Redis time.
HEADER = 8
local units, at = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = #KEYS
if ARGV[3] ~= '' then
  leave_members(KEYS[n], ARGV[3])
  n = n - 1
end
if units > 0 then refund_all(n, units, at) end
return NOW
