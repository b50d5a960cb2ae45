-- acquire.lua: grant between min and max units to every limit of one key, or
-- to none (all-or-nothing across the limits).
--
-- KEYS[i]   state key of limit i; all KEYS share one hash tag (one slot)
-- ARGV[1]   min: grant at least this many units, or nothing
-- ARGV[2]   max: grant at most this many units (min <= max)
-- ARGV[3]   reserve: 1 lets leaky buckets queue the request (WaitN), 0 admits
--           only what conforms now
-- ARGV[4]   share: the number of live instances (1 or more). When the budget
--           is scarce, a grant above min shrinks toward (units left) / share,
--           so that one greedy instance cannot take what the others need
-- ARGV[5..] the limits, four values each (see limit() in prelude.lua)
--
-- Returns eight integers:
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
--   valid_for    us the grant may be used for before it lapses (the end of a
--                window or bucket, always > 0), or 0 for no limit of the
--                policy's own, and when denied. (Not -1: go-redis allocates to
--                box an integer reply outside 0..255, on every call.)
local min, max, reserve, share = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n = #KEYS

-- Phase 1: read every limit, writing nothing that counts; the grant is the
-- least any limit can give. S1..S3 hold each limit's state, AV its room.
local S1, S2, S3, AV = {}, {}, {}, {}
local least = max -- the least room of any limit, at most max
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local a, b, c = ALG[alg].load(KEYS[i], rate, period, burst)
  local av = ALG[alg].avail(a, b, c, rate, period, burst, reserve)
  S1[i], S2[i], S3[i], AV[i] = a, b, c, av
  if av < least then least = av end
end

-- Fair share: never more than a 1/share part of the room left, nor less than
-- min. With plenty of room this changes nothing (the part exceeds max).
local grant = least
if share > 1 then
  local least_room = AV[1]
  for i = 2, n do least_room = math.min(least_room, AV[i]) end
  grant = math.min(least, math.max(min, idiv(least_room, share)))
end

if grant < min then
  -- Denied: charge nothing. The decider is the denying limit whose
  -- retry_after is longest: min units fit only once every limit has room.
  local decider, retry, reset = 1, -1, 0
  for i = 1, n do
    if AV[i] < min then
      local alg, rate, period, burst = limit(i)
      local A = ALG[alg]
      local r = A.retry(KEYS[i], S1[i], S2[i], S3[i], rate, period, burst, min, reserve)
      if r > retry then
        decider, retry = i, r
        reset = A.reset(S1[i], S2[i], S3[i], rate, period, burst)
      end
    end
  end
  return { 0, NOW, decider, 0, AV[decider], math.max(1, retry), reset, 0 }
end

-- Phase 2: charge every limit the same grant.
local wait, decider, left, reset, valid = 0, 1, -1, 0, -1
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local A = ALG[alg]
  local v = A.valid(S1[i], S2[i], S3[i], rate, period, burst)
  if v >= 0 and (valid < 0 or v < valid) then valid = v end
  local a, b, c, w = A.commit(KEYS[i], S1[i], S2[i], S3[i], rate, period, burst, grant)
  if w > wait then wait = w end
  local l = A.avail(a, b, c, rate, period, burst, reserve)
  local r = A.reset(a, b, c, rate, period, burst)
  if left < 0 or l < left or (l == left and r > reset) then
    decider, left, reset = i, l, r
  end
end
return { grant, NOW, decider, wait, left, 0, reset, math.max(0, valid) }
