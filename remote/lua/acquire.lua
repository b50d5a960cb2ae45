-- acquire.lua: grant between min and max units to every limit of one key, or
-- to none (all-or-nothing across the limits).
--
-- KEYS[i]   state key of limit i; all KEYS share one hash tag (one slot)
-- ARGV[1]   min: grant at least this many units, or nothing
-- ARGV[2]   max: grant at most this many units (min <= max)
-- ARGV[3]   reserve: 1 lets leaky buckets queue the request (WaitN), 0 admits
--           only what conforms now
-- ARGV[4..] the limits, four values each (see limits_from in prelude.lua)
--
-- Returns seven integers:
--   granted      units charged to every limit; 0 means denied, nothing charged
--   now          the Redis time of the decision, us (a refund names it)
--   decider      1-based index of the limit that decided: when denied, the
--                denying limit that frees up last; when granted, the one with
--                the fewest units left
--   wait         us until the granted units may be used (a leaky bucket's
--                queue); 0 otherwise
--   remaining    units the decider could still grant now
--   retry_after  us until min units could be granted; 0 when granted
--   reset_after  us until the decider is fully replenished
local min, max, reserve = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lims = limits_from(4)
local now = now_us()

-- Phase 1: read every limit, writing nothing; the grant is the least any
-- limit can give.
local st, avail, grant = {}, {}, max
for i, lim in ipairs(lims) do
  st[i] = ALG[lim.alg].load(KEYS[i], lim, now)
  st[i].key = KEYS[i]
  avail[i] = ALG[lim.alg].avail(st[i], lim, now, reserve)
  if avail[i] < grant then grant = avail[i] end
end

if grant < min then
  -- Denied: charge nothing. The decider is the denying limit whose
  -- retry_after is longest: min units fit only once every limit has room.
  local decider, retry = 1, -1
  for i, lim in ipairs(lims) do
    if avail[i] < min then
      local r = ALG[lim.alg].retry(st[i], lim, now, min, reserve)
      if r > retry then decider, retry = i, r end
    end
  end
  local lim = lims[decider]
  return { 0, now, decider, 0, avail[decider], math.max(1, retry),
    ALG[lim.alg].reset(st[decider], lim, now) }
end

-- Phase 2: charge every limit the same grant.
local wait, decider, left, reset = 0, 1, -1, 0
for i, lim in ipairs(lims) do
  local w = ALG[lim.alg].take(st[i], lim, now, grant)
  if w > wait then wait = w end
  ALG[lim.alg].save(KEYS[i], st[i], lim, now)
  local l = ALG[lim.alg].avail(st[i], lim, now, reserve)
  local r = ALG[lim.alg].reset(st[i], lim, now)
  if left < 0 or l < left or (l == left and r > reset) then
    decider, left, reset = i, l, r
  end
end
return { grant, now, decider, wait, left, 0, reset }
