-- peek.lua: what acquire.lua would decide for one unit of a key now, with
-- min = max = 1 and reserve 0, charging nothing (Limiter.Peek).
--
-- KEYS[i]   state key of limit i, as in acquire.lua
-- KEYS[#KEYS] the key's block, as in acquire.lua
-- ARGV[1-8] unused (keep the limits at the same place as in acquire.lua)
-- ARGV[9..] the limits, as in acquire.lua
--
-- It writes nothing that counts: the only write is a sliding log's load,
-- which drops entries that slid out of the period (as any call would). The
-- fair share among leasing members is not applied: Peek asks whether the
-- limits have room, not whether one member's share has.
--
-- Returns a decision's integers (see prelude.lua), as if for a request of
-- one unit:
--   granted      1 when one unit would be granted, else 0 (nothing charged)
--   remaining    units the decider could grant now (nothing is charged, so
--                one more than an admitting Allow would report)
--   retry_after  us until one unit could be granted; 0 when it could now
--   decider      when denied, the denying limit that frees up last; else the
--                limit with the fewest units left (the longest reset on a tie)
--   blocked      1 when the key is blocked (as acquire.lua)
-- and valid_for, wait and members 0.
HEADER = 8
local n = #KEYS - 1
do
  local left = blocked_for(KEYS[#KEYS])
  if left > 0 then return reply(0, NOW, 0, left, 0, left, 0, 0, 0, 1) end
end
local S1, S2, S3, AV = {}, {}, {}, {}
local least = -1
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local a, b, c = ALG[alg].load(KEYS[i], rate, period, burst)
  local av = ALG[alg].avail(a, b, c, rate, period, burst, 0)
  S1[i], S2[i], S3[i], AV[i] = a, b, c, av
  if least < 0 or av < least then least = av end
end

if least < 1 then
  -- As acquire.lua denies: the decider is the denying limit whose wait for
  -- one unit is longest.
  local decider, retry, reset = denier(n, S1, S2, S3, AV, 1, 0)
  return reply(0, NOW, AV[decider], reset, 0, max(1, retry), decider - 1)
end

local decider, left, reset = 1, -1, 0
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local r = ALG[alg].reset(S1[i], S2[i], S3[i], rate, period, burst)
  if left < 0 or AV[i] < left or (AV[i] == left and r > reset) then
    decider, left, reset = i, AV[i], r
  end
end
return reply(1, NOW, left, reset, 0, 0, decider - 1)
