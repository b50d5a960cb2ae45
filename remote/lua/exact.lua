-- exact.lua: admission for a call that names no member (exact mode, and a
-- lease of a key whose demand is not measured yet): acquire.lua without
-- the members and their fair share, which such a call never reads. Same
-- KEYS (no members hash) as acquire.lua; ARGV without the member's values:
--
-- ARGV[1]   min, ARGV[2] max, ARGV[3] reserve: as in acquire.lua
-- ARGV[4..] the limits, as in acquire.lua
-- then, only when units go back: back and back_at, as acquire.lua's
--           ARGV[6] and ARGV[7]
--
-- Returns a decision's integers (see prelude.lua), as few as say it: no
-- members, and no wait or valid_for where they are 0.
--
-- It is the script of every exact decision, so it is kept lean: every
-- argument costs Redis a string to make and a number to read, and a table
-- costs more than the arithmetic of a decision (docs/scripts.md). A policy
-- of one limit, the common case, is decided with no table; one of one
-- token or leaky bucket without reserve goes to bucket.lua instead.
HEADER = 3
local minimum, maximum, reserve = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = #KEYS - 1

-- What the caller leased earlier and did not use goes back first.
if #ARGV > HEADER + 4 * n then
  refund_all(n, tonumber(ARGV[HEADER + 4 * n + 1]), tonumber(ARGV[HEADER + 4 * n + 2]))
end

do
  local left = blocked_for(KEYS[n + 1])
  if left > 0 then return reply(0, NOW, 0, left, 0, left, 0, 0, 0, 1) end
end

if n == 1 then
  local alg, rate, period, burst = limit(1)
  local key = KEYS[1]
  local A = ALG[alg]
  local a, b, c = A.load(key, rate, period, burst)
  local av = A.avail(a, b, c, rate, period, burst, reserve)
  if av < minimum then
    return reply(0, NOW, av, A.reset(a, b, c, rate, period, burst), 0,
      max(1, A.retry(key, a, b, c, rate, period, burst, minimum, reserve)))
  end
  local valid = A.valid(a, b, c, rate, period, burst)
  local g, wait = min(av, maximum)
  a, b, c, wait = A.commit(key, a, b, c, rate, period, burst, g)
  av = A.avail(a, b, c, rate, period, burst, reserve)
  if wait > 0 then return reply(g, NOW, av, A.reset(a, b, c, rate, period, burst), max(0, valid), 0, 0, wait) end
  if valid > 0 then return reply(g, NOW, av, A.reset(a, b, c, rate, period, burst), valid) end
  return reply(g, NOW, av, A.reset(a, b, c, rate, period, burst))
end

-- Several limits: read every one, writing nothing; the grant is the least
-- any can give, charged to all, or nothing.
local S1, S2, S3, AV = {}, {}, {}, {}
local least, valid = maximum, -1
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local A = ALG[alg]
  local a, b, c = A.load(KEYS[i], rate, period, burst)
  local av = A.avail(a, b, c, rate, period, burst, reserve)
  S1[i], S2[i], S3[i], AV[i] = a, b, c, av
  if av < least then least = av end
  local v = A.valid(a, b, c, rate, period, burst)
  if v >= 0 and (valid < 0 or v < valid) then valid = v end
end
if least < minimum then
  local decider, retry, reset = denier(n, S1, S2, S3, AV, minimum, reserve)
  return reply(0, NOW, AV[decider], reset, 0, max(1, retry), decider - 1)
end
local wait, decider, left, reset = charge_all(n, S1, S2, S3, least, reserve)
return reply(least, NOW, left, reset, max(0, valid), 0, decider - 1, wait)
