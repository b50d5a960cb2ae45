-- acquire.lua: admission. Grant between min and max units to every limit of
-- one key, or to none (all-or-nothing across the limits); under the fair
-- share (fairshare.lua) of the key's members (members.lua), no more than
-- this member's share allows. docs/scripts.md tells the model.
--
-- KEYS[i]   state key of limit i; all KEYS share one hash tag (one slot)
-- KEYS[n+1] with a member id only: the key's members hash (members.lua)
-- KEYS[#KEYS] the key's block (Store.Block): while it exists, nothing is
--           granted
-- ARGV[1]   min: grant at least this many units, or nothing
-- ARGV[2]   max: grant at most this many units (min <= max)
-- ARGV[3]   reserve: 1 lets buckets queue the request (WaitN), 0 admits
--           only what conforms now, 2 as 0 for a regional pool's refill,
--           whose batches are the member's whole part of the capacity
-- ARGV[4]   member: the id of the instance leasing, or '' (exact mode, and
--           a lease of a key with no measured demand yet)
-- ARGV[5]   demand: the units per second the member wants of this key
-- ARGV[6]   back: units of an earlier grant of this key to the member that
--           were never used, given back before anything is granted
-- ARGV[7]   back_at: the Redis time (us) of that earlier grant
-- ARGV[8]   horizon (us): how long a lease of this member is meant to last
-- ARGV[9..] the limits, four values each (see limit() in prelude.lua)
--
-- Returns a decision's integers (see prelude.lua), all ten.
HEADER = 8
local minimum, maximum, reserve = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local member, demand = ARGV[4], tonumber(ARGV[5])
local back, back_at, horizon = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local bkey = KEYS[#KEYS]
set_part(reserve == 2)
local n = #KEYS - 1
local mkey
if member ~= '' then
  n = n - 1
  -- A member with no demand has no share to claim: it is left out.
  if demand > 0 then mkey = KEYS[n + 1] end
end

-- Phase 0: what this member leased earlier and did not use goes back
-- first, in the same call (a refund of its own would cost a round trip).
if back > 0 then refund_all(n, back, back_at) end

-- A blocked key is denied before anything is read or charged.
do
  local left = blocked_for(bkey)
  if left > 0 then return reply(0, NOW, 0, left, 0, left, 0, 0, 0, 1) end
end

-- Phase 1: read every limit, writing nothing. S1..S3 hold each limit's
-- state, AV its room, V how long a grant lives (-1: no bound), P its
-- period as the fair share sees it (a calendar window's span). least is
-- the grant every limit allows; R the key's rate (units/s) and C its
-- capacity, of the limit that can give the least over a horizon (tight).
local S1, S2, S3, AV, V, P = {}, {}, {}, {}, {}, {}
local least = maximum
local R, C, tight, valid, supply = -1, 0, 1, -1, -1
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local A = ALG[alg]
  local a, b, c = A.load(KEYS[i], rate, period, burst)
  local av = A.avail(a, b, c, rate, period, burst, reserve)
  S1[i], S2[i], S3[i], AV[i] = a, b, c, av
  if av < least then least = av end
  local v = A.valid(a, b, c, rate, period, burst)
  if A.span then period, burst = A.span(a, b, c, rate, period, burst) end
  P[i] = period
  local r = rate * 1000000 / period
  local sup = av + r * horizon / 1000000
  if supply < 0 or sup < supply or sup == supply and r < R then R, C, tight, supply = r, burst, i, sup end
  V[i] = v
  if v >= 0 and (valid < 0 or v < valid) then valid = v end
end
-- The limits deny min units themselves: a denial then tells their
-- retry_after, as exact mode's, not this member's.
local limits_deny = least < minimum

-- Phase 2: the tight limit's window, when its grants lapse (tv >= 0): tv
-- us to its end, wlen its length, wstart its start. windowed: its room
-- comes whole (a fixed window), and the members' parts of it are released
-- from release_at us before its end.
local tv = V[tight]
-- (A regional pool's units lapse by generation, not with a window.)
if ALG[limit(tight)].pool then tv = -1 end
local windowed, wlen, wstart, release_at, released = false, 0, 0, 0, false
if tv >= 0 then
  windowed = ALG[limit(tight)].whole == true
  wlen = P[tight]
  wstart = NOW + tv - wlen
  release_at = floor(wlen / RELEASE)
  released = tv <= release_at
end
local whole = windowed -- before the members settle it (below)

-- Phase 3: the members and the fair share. cap is what this member may
-- take now (huge while the demand fits), need the least grant worth its
-- while, refill its fair rate while it is held to it (else 0).
local cap, need, members, refill = HUGE, minimum, 0, 0
local tokens -- this member's bucket, while the demand exceeds the rate
local spare = 0 -- room no member's bucket claims
local room, room_rate = 0, 0 -- room beyond the others' buckets, and its growth (units/s)
local spare_part = 0 -- this member's part of the spare: its fair rate's of those not lapsed
local over = 0 -- what the key's bucket holds past half its capacity (PART)
local paced, pace_len, ahead -- a paced window's room made so far, its pace's length (us), and how far its grants ran ahead
local debt = false -- a grant is charged to the bucket in full, into debt
local M -- the key's members (members.lua), when the call names one
local fair, size = demand, 0 -- this member's fair rate and bucket size, for its entry
local uw = 0 -- the start of the window whose part this member's bucket holds, or 0
if mkey then
  M = read_members(mkey, member, demand, member_ttl(horizon))
  local total, at, newest = M.D, M.at, M.newest
  tokens = M.tokens
  -- A window is shared by parts only among members that all knew of each
  -- other as it opened.
  local settled = newest < wstart
  windowed = windowed and settled
  members = M.n
  M.class = class_of(demand, R)
  local h = horizon
  if valid >= 0 and valid < h then h = valid end
  -- A member alone on a whole window has nobody to keep it for: it takes
  -- what it asks for.
  -- Nor does a region's pool keep units for its instances: they take
  -- them as they come (docs/regions.md).
  if total > R and not (members == 1 and whole) and not ALG[limit(tight)].pool then
    -- A window whose members did not all know of each other as it opened
    -- is paced while they make themselves known (docs/scripts.md).
    if tv >= 0 and not settled and members > 1 and total * EXCESS > R * (EXCESS + 1) then
      local pend = min(wstart + wlen, newest + horizon)
      if pend > NOW then
        local _, rate = limit(tight)
        pace_len = pend - wstart
        -- (Whole units held back. S2: the units the window has granted.)
        local made = rate - floor(rate * (pend - NOW) / pace_len) - S2[tight]
        paced = max(0, min(AV[tight], made))
        ahead = max(0, -made)
        if paced < least then least = paced end
      end
    end
    local cs = classes(M)
    local L = water_level(cs, R)
    local f = min(demand, L)
    fair = f
    local batch
    batch, size = batch_size(demand, f, minimum, h, valid, R, C, members)
    -- From a whole window, a member's part is its share of the window's
    -- units, whole from the window's start; else a bucket at its rate.
    if windowed then
      size = allot(f, wlen)
      uw = wstart
    end
    tokens = refill_bucket(tokens, at, f, size, windowed, whole, wstart)
    -- A member may take all the room but what the others' buckets hold,
    -- from its own bucket first; the room beyond every bucket (spare) is
    -- anybody's.
    local claims, growth, live = claims_of(M, cs, L, f, windowed and wlen or 0, wstart, released, h, valid, R, C)
    local avail = paced or AV[tight]
    room = floor(max(0, avail - claims))
    room_rate = max(f, R - growth)
    spare = max(0, room - max(0, tokens))
    spare_part = f / (f + live)
    over = avail - part * C
    -- The shares hold only while the room is short of what the members
    -- want over a horizon (from a window shared by parts, over what is
    -- left of it); else a grant beyond the bucket is a debt.
    local span = horizon
    if windowed then span = max(horizon, tv) end
    if avail < total * span / 1000000 then
      -- (Its own bucket too: when the buckets hold more than the room,
      -- first come, first served rather than none.)
      cap = max(room, floor(max(0, tokens)))
      need = max(minimum, min(batch, maximum))
      -- A region's refill takes what its share holds, whenever it asks:
      -- its pool, not a batch, carries it to the next (docs/regions.md).
      if reserve == 2 then need = minimum end
      -- What is left of a window's part is worth taking: it does not grow.
      if windowed then need = max(minimum, min(need, cap)) end
      refill = f
    else
      debt = true
      -- (From a whole window, no more than this member's part of its rest.)
      if whole then cap = max(minimum, floor(avail * f / R)) end
    end
  else
    tokens = nil -- the demand fits: no bucket of its own
    -- (It counts as a full bucket of its demand's batch to the others.)
    size = select(2, batch_size(demand, demand, 1, h, valid, R, C, members))
  end
end

-- Writes this member's entry, whatever the outcome (the demand counts
-- even when nothing is granted), its bucket charged g. A window's part is
-- written as what it took of it (u), for the others to read from U.
local function save(g)
  if not M then return end
  local kept, from_spare
  kept, tokens, from_spare = charge_bucket(tokens, g, debt, C)
  spare = spare - from_spare
  local u = 0
  if uw > 0 then fair, size, u = 0, 0, max(0, size - (kept or size)) end
  write_member(M, kept, fair, size, u, uw)
end

-- A denial: retry_after when min units fit for whom it tells (the limits',
-- or, with share, this member's); ask, when this member asks again, if
-- later. Neither past the end of a window of the key's (valid): a new
-- window is shared anew.
local function deny(remaining, reset, retry, ask, decider, share)
  retry = max(1, retry)
  if share and valid > 0 and retry > valid then retry = valid end
  if valid > 0 and ask > valid then ask = max(retry, valid) end
  if ask <= retry then ask = 0 end
  return reply(0, NOW, remaining, reset, 0, retry, decider - 1, ask, members, share and 2 or 0)
end

-- Phase 4: short of a batch under the fair share while the limits have
-- room: denied, back once the bucket holds the batch.
if refill > 0 and cap < need and not limits_deny then
  local retry
  if windowed then
    -- Back when the others' parts are released, or the window ends.
    if released then retry = max(1, tv) else retry = max(1, tv - release_at) end
  else
    retry = max(1, share_wait(need, tokens, refill, room, room_rate))
    if valid >= 0 and retry >= valid and least >= minimum then
      -- The window ends before the batch: what is left of it is taken,
      -- in debt, rather than lost.
      cap, debt = HUGE, true
    end
  end
  if cap < need then
    save(0)
    local alg, rate, period, burst = limit(tight)
    local reset = ALG[alg].reset(S1[tight], S2[tight], S3[tight], rate, period, burst)
    return deny(AV[tight], reset, retry, 0, tight, true)
  end
end

-- Phase 5: the grant's size.
local grant = min(least, cap)
if (reserve == 2 or ALG[limit(tight)].pool) and mkey and valid >= 0 and valid < horizon then
  -- A region's refill, or an instance's lease of its pool, asks for a
  -- horizon's worth: a window (or a generation) that ends sooner gives
  -- what it uses before its end.
  grant = min(grant, max(minimum, ceil(maximum * valid / horizon)))
end
if refill > 0 and not (windowed and released) and reserve ~= 2 then
  -- Under the fair share, a batch or two from its bucket: what a member
  -- holds unused stays small; and from a bucket (no bound on a grant's
  -- life) its part of the spare, by fair rate among the members whose
  -- buckets did not lapse: left in the key's bucket, the spare would
  -- overflow it while the members wait for their batches (a window's
  -- room does not overflow: it ends), and taken whole by whoever asks
  -- first, it would go by who is quickest. But what the key's bucket
  -- holds past its half is anybody's, as far as the spare holds it: a
  -- batch is at most a member's part of half the capacity (PART), so
  -- members asking on time keep the bucket under its half; past it they
  -- are quiet or late, and it would overflow waiting for them.
  -- (A released window's rest is anybody's, whole; a region's refill
  -- takes its share's bucket and the spare room.)
  local beyond = 0
  if valid < 0 then beyond = floor(max(spare * spare_part, min(spare, over))) end
  grant = min(grant, max(2 * need, floor(tokens)) + beyond)
end
if member ~= '' and minimum > 1 and grant - grant % minimum >= need then
  -- A lease for requests of min units: a remainder below min would lapse
  -- unused.
  grant = grant - grant % minimum
end
if grant < need then
  -- The decider is the denying limit that frees up last.
  local decider, retry, reset = denier(n, S1, S2, S3, AV, need, reserve)
  if paced and paced < need then
    -- Short of the paced room: back when it has been made.
    local alg, rate, period, burst = limit(tight)
    local p = cdiv((need - paced + ahead) * pace_len, rate)
    if p > retry then
      decider, retry = tight, p
      reset = ALG[alg].reset(S1[tight], S2[tight], S3[tight], rate, period, burst)
    end
  end
  if need > minimum and grant >= minimum and valid >= 0 and retry >= valid then
    -- A batch would come only after the window ends: take what it has left.
    need = grant
  else
    -- Denied, nothing charged. ask: when this member asks again, no
    -- sooner than its share (or the room beyond the others') makes a
    -- batch, unless its own bucket holds it (docs/scripts.md).
    local ask = retry
    if refill > 0 and members > 1 and decider == tight and tokens < need then
      ask = max(retry, share_wait(need, tokens, refill, room, room_rate))
    elseif mkey and refill == 0 and members > 1 and decider == tight then
      -- The demands fit in R, yet the limit is empty: back once it has
      -- made a batch of this member's demand (at most its part of C).
      local b = max(need, min(demand * horizon / TENTH, C / members))
      ask = max(retry, cdiv(b * 1000000, R))
    end
    save(0)
    if limits_deny then
      -- Told when the limits have room for the request, as exact mode
      -- tells; this member asks again no sooner than its batch.
      decider, retry, reset = denier(n, S1, S2, S3, AV, minimum, reserve)
      return deny(AV[decider], reset, retry, ask, decider)
    end
    return deny(AV[decider], reset, ask, 0, decider, true)
  end
end

-- Phase 6: charge every limit the same grant. Under the fair share with
-- other members, retry_after says when this member's next batch is due:
-- asking sooner would only be denied.
save(grant)
local wait, decider, left, reset = charge_all(n, S1, S2, S3, grant, reserve)
local next = 0
if refill > 0 and members > 1 and windowed then
  -- From a window: nothing more until the others' parts are released,
  -- once this member's part and the spare are spent.
  if not released and max(0, tokens) + max(0, spare) < minimum then next = max(1, tv - release_at) end
elseif refill > 0 and members > 1 then
  next = next_batch(need, tokens, spare, refill)
end
if valid > 0 and next > valid then next = valid end
return reply(grant, NOW, left, reset, max(0, valid), next, decider - 1, wait, members)
