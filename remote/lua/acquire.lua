-- acquire.lua: admission. Grant between min and max units to every limit of
-- one key, or to none (all-or-nothing across the limits); under the fair
-- share (fairshare.lua) of the key's members (members.lua), no more than
-- this member's share allows.
--
-- KEYS[i]   state key of limit i; all KEYS share one hash tag (one slot)
-- KEYS[n+1] with a member id only: the key's members hash (members.lua)
-- KEYS[#KEYS] the key's block (Store.Block): while it exists, nothing is
--           granted
-- ARGV[1]   min: grant at least this many units, or nothing
-- ARGV[2]   max: grant at most this many units (min <= max)
-- ARGV[3]   reserve: 1 lets buckets queue the request (WaitN), 0 admits
--           only what conforms now
-- ARGV[4]   member: the id of the instance leasing, or '' (exact mode, and
--           a lease of a key with no measured demand yet)
-- ARGV[5]   demand: the units per second the member wants of this key
-- ARGV[6]   back: units of an earlier grant of this key to the member that
--           were never used, given back before anything is granted
-- ARGV[7]   back_at: the Redis time (us) of that earlier grant
-- ARGV[8]   horizon (us): how long a lease of this member is meant to last
-- ARGV[9..] the limits, four values each (see limit() in prelude.lua)
--
-- Members (members.lua) and their fair share (fairshare.lua): a member
-- short of its bucket, or finding the limits short, waits until there is a
-- useful batch (a tenth of a horizon of its share, less for a small burst,
-- or what a window has left), not for every unit as it frees up.
--
-- Returns a decision's integers (see prelude.lua), all ten.
HEADER = 8
local minimum, maximum, reserve = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local member, demand = ARGV[4], tonumber(ARGV[5])
local back, back_at, horizon = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local bkey = KEYS[#KEYS]
local n = #KEYS - 1
local mkey
if member ~= '' then
  n = n - 1
  -- A member with no demand has no share to claim: it is left out.
  if demand > 0 then mkey = KEYS[n + 1] end
end

-- Phase 0: what this member leased earlier and did not use goes back first,
-- in the same call (a refund of its own would cost a round trip).
if back > 0 then refund_all(n, back, back_at) end

-- A blocked key is denied before anything is read or charged, the members
-- left alone.
do
  local left = blocked_for(bkey)
  if left > 0 then return reply(0, NOW, 0, left, 0, left, 0, 0, 0, 1) end
end

-- Phase 1: read every limit, writing nothing that counts; the grant is the
-- least any limit can give. S1..S3 hold each limit's state, AV its room.
-- R is the key's rate (units/s) and C the capacity of the limit that sets it
-- (tight): the limit that can give the least over a horizon, its room now
-- and what it makes meanwhile. (Not merely the one of the least long-run
-- rate: a quota of a day, or 100000/h, beside 100/s has that, yet while
-- its room lasts the 100/s is what the members share; shared by the
-- quota's rate, with room to spare, the 100/s would go to whoever asks
-- first.) valid the least time any limit lets a grant live (-1: none). P
-- holds each limit's period (us) as the fair share sees it: a calendar
-- window's slots hold its ends, and its span gives its length (and
-- capacity).
local S1, S2, S3, AV, V, P = {}, {}, {}, {}, {}, {}
local least = maximum -- the least room of any limit, at most max
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
-- Whether the limits themselves deny a request of min units (as exact mode
-- would), whatever the fair share says: a denial then tells the limits'
-- retry_after, not this member's (see deny).
local limits_deny = least < minimum

-- When the key's tight limit is a window (its grants lapse: tv >= 0),
-- tv is the us to that window's end, wlen its length, wstart its start.
-- The key's rate is a window's (windowed) when that window's room comes
-- whole (a fixed window; a sliding window counter's comes as the last
-- window's weight fades, as a bucket's does), and its second half (from
-- release_at us before its end) is when the members' parts of it are
-- released (see the fair share below).
local tv = V[tight]
local windowed, wlen, wstart, release_at, released = false, 0, 0, 0, false
if tv >= 0 then
  windowed = ALG[limit(tight)].whole == true
  wlen = P[tight]
  wstart = NOW + tv - wlen
  release_at = floor(wlen / RELEASE)
  released = tv <= release_at
end
local whole = windowed -- before the members settle it (below)
-- Members and the fair share: cap is what this member may take now (huge
-- when the demand fits), need the least grant worth its while.
local cap, need, members, refill = HUGE, minimum, 0, 0
local tokens -- this member's bucket, while the demand exceeds the rate
local spare = 0 -- room no member's bucket claims
local room, room_rate = 0, 0 -- room beyond the others' buckets, and how fast it grows (units/s)
local paced, pace_len, ahead -- a whole window's room made so far, when it is paced (below), over how long (us) it is made, and how far the window's grants ran ahead of the pace
local debt = false -- a grant is charged to the bucket in full, into debt
local M -- the key's members (members.lua), when the call names one
local fair, size = demand, 0 -- this member's fair rate and its bucket's size, for its entry
local uw = 0 -- the start of the window whose part this member's bucket holds, or 0
if mkey then
  M = read_members(mkey, member, demand, member_ttl(horizon))
  local total, at, newest = M.D, M.at, M.newest
  tokens = M.tokens
  local settled = newest < wstart
  -- A window is shared out by parts only among members that all knew of
  -- each other as it opened: in a window where a member joins (the first
  -- of a run, a fleet's restart), the parts of the members already there
  -- would be of a share too large, taken before the newcomer asks. There,
  -- the members' buckets refill as a bucket's, as for any other limit.
  windowed = windowed and settled
  members = M.n
  M.class = class_of(demand, R)
  local h = horizon
  if valid >= 0 and valid < h then h = valid end
  -- A member alone on a key whose room comes whole (a fixed window) has
  -- nobody to keep it for, and the window makes no more before it ends:
  -- it takes what it asks for, as when its demand fits. (From a limit
  -- that refills as it goes, it still waits for a batch: else it would
  -- ask for every unit as it frees up.)
  if total > R and not (members == 1 and whole) then
    -- A window shared by members that did not all know of each other as
    -- it opened (a whole one's parts are not kept then: see above) is
    -- paced while they make themselves known: its room counts as made at
    -- an even rate from the window's start until a horizon after the
    -- newest member joined, or the window's end if that is sooner, so that
    -- it goes to the members' buckets, refilling at their shares, as a
    -- bucket's does. Else, where the window's room is there at once (a
    -- fixed window; a sliding window counter after a quiet window),
    -- whoever joins first takes it before the others are known (a fleet's
    -- start, a flood's first window), and the rest, spare to all, goes to
    -- the fastest. (A long window, a quota of hours or days, is paced for
    -- a horizon's worth of it: not at all. A sliding window counter whose
    -- last window was full makes its room at that pace anyway.) Only while
    -- the members want more than the rate by a 1/EXCESS part or more: a
    -- demand near the rate finds room for nearly all of it, and a room
    -- made at the pace of that demand would deny it at every lull's end.)
    if tv >= 0 and not settled and members > 1 and total * EXCESS > R * (EXCESS + 1) then
      local pend = min(wstart + wlen, newest + horizon)
      if pend > NOW then
        local _, rate = limit(tight)
        pace_len = pend - wstart
        -- (Whole units held back, so that a pace a unit's worth long is
        -- none. S2: the units the window has granted, for both algorithms.)
        local made = rate - floor(rate * (pend - NOW) / pace_len) - S2[tight]
        paced = max(0, min(AV[tight], made))
        ahead = max(0, -made)
        if paced < least then least = paced end
      end
    end
    local cs = classes(M)
    local L = water_level(cs, R)
    local f = min(demand, L) -- this member's fair rate
    fair = f
    -- A member's bucket holds a batch (at least min): what the buckets
    -- hold is kept from the others, so it is room that waits unused, a
    -- tenth of what the key makes in a horizon in all, little more than
    -- its capacity. (A window that will not have a batch before it ends
    -- gives what it has left: see below.)
    local batch
    batch, size = batch_size(demand, f, minimum, h, valid, R, C, members)
    -- A window's room comes whole, when the window opens: a bucket that
    -- refills over the window would spread it out, and the member that
    -- asks fastest would take what the buckets leave. So when the key's
    -- rate is a window's, each member's part is its share of the window
    -- (its allotment, f/R of the window's units), whole from the window's
    -- start, and the others' allotments are kept from it until the
    -- window's second half (RELEASE), when what is left is anybody's: a
    -- member that stopped asking strands nothing. A window opened late in
    -- a run is still taken at once, each member taking its part.
    if windowed then
      size = allot(f, wlen)
      uw = wstart
      if not tokens or at < wstart then tokens = size else tokens = min(size, tokens) end
    elseif not tokens then tokens = size else
      -- A debt taken from a whole window is that window's: its room is
      -- gone with it, and the next window's is not owed for it.
      local since = at
      if whole and at < wstart and tokens < 0 then tokens, since = 0, wstart end
      tokens = min(size, tokens + f * (NOW - since) / 1000000)
    end
    -- What the buckets hold is kept for their members: a member may take
    -- all the room but what the others' buckets hold, from its own bucket
    -- first; the room beyond every bucket (spare) is anybody's, at no cost
    -- to its bucket. So a member that asks less often than the others
    -- still finds its share, and room that a member leaves unused goes to
    -- those who want it rather than overflow the limit's capacity.
    local claims, growth = claims_of(M, cs, L, f, windowed and wlen or 0, wstart, released, h, valid, R, C)
    local avail = paced or AV[tight]
    room = floor(max(0, avail - claims))
    -- The room beyond the others' buckets grows as fast as the limit
    -- refills, less what goes into the buckets not yet full, and never
    -- slower than this member's own share.
    room_rate = max(f, R - growth)
    spare = max(0, room - max(0, tokens))
    -- The shares are held to only while the room is short (less than the
    -- members want over a horizon; from a window shared by parts, over
    -- what is left of it: that room is all there is until it ends). With
    -- room to spare, anyone takes what it asks for, and what it takes
    -- beyond its bucket is a debt (down to the capacity) that it pays off
    -- once the room is short: so the shares hold over time.
    local span = horizon
    if windowed then span = max(horizon, tv) end
    if avail < total * span / 1000000 then
      -- (Its own bucket, too, when the buckets together hold more than
      -- the room: each is at least min, which a small rate's share may
      -- not make. First come, first served then, rather than none.)
      cap = max(room, floor(max(0, tokens)))
      need = max(minimum, min(batch, maximum))
      -- From a window, what is left of the member's part (or, released,
      -- of the window) is worth taking, however little: it does not grow.
      if windowed then need = max(minimum, min(need, cap)) end
      refill = f
    else
      debt = true
      -- (From a whole window, no more at once than this member's part of
      -- what is left of it.)
      if whole then cap = max(minimum, floor(avail * f / R)) end
    end
  else
    tokens = nil -- the demand fits: no bucket of its own
    -- (It counts as a full bucket of its demand's batch to the others.)
    size = select(2, batch_size(demand, demand, 1, h, valid, R, C, members))
  end
end

-- Writes this member's entry, when the call names one, whatever the
-- outcome: the demand counts even when nothing is granted. A grant of g is
-- charged to the bucket as far as the bucket holds it (the rest was spare),
-- or wholly when it is taken in debt (a member in debt pays for spare too:
-- it took its part before); a bucket is never kept below -C.
local function save(g)
  if not M then return end
  local kept
  if tokens then
    local charged = min(g, max(0, tokens))
    if debt or tokens < 0 then charged = g end
    kept = max(-C, tokens - charged)
    tokens = tokens - charged
    spare = spare - (g - charged)
  end
  local u = 0
  if uw > 0 then
    -- A window's part: the others read the parts from U, not from a
    -- bucket's rate and size.
    fair, size, u = 0, 0, max(0, size - (kept or size))
  end
  write_member(M, kept, fair, size, u, uw)
end

-- Under the fair share, the us until this member may have need units: when
-- its own bucket holds them, or when the room beyond the others' buckets
-- does, whichever comes first. (Told to wait for its own bucket alone, every
-- member would leave that room unused while the others wait for theirs.)
local function share_wait()
  local own = cdiv((need - max(0, tokens)) * 1000000, refill)
  return min(own, cdiv((need - room) * 1000000, room_rate))
end

-- A denial: retry_after is when min units fit for whom it tells (the
-- limits', or this member's, see below); ask, when this member asks again,
-- if later: its share's next batch. Neither past the end of a window of the
-- key's (valid): a new window is shared anew, and a member that waited
-- past its start would strand its part.
-- share: the limits had room for the request; this member's share had not.
local function deny(remaining, reset, retry, ask, decider, share)
  retry = max(1, retry)
  -- (The share's wait, too: the limits' own retry is theirs, as exact
  -- mode's, even past the window of another limit.)
  if share and valid > 0 and retry > valid then retry = valid end
  if valid > 0 and ask > valid then ask = max(retry, valid) end
  if ask <= retry then ask = 0 end
  return reply(0, NOW, remaining, reset, 0, retry, decider - 1, ask, members, share and 2 or 0)
end

-- Short of a batch under the fair share while the limits have room for
-- the request: denied, back once the bucket holds the batch. (When the
-- limits deny the request too, the denial below tells theirs.)
if refill > 0 and cap < need and not limits_deny then
  local retry
  if windowed then
    -- The member's part of the window is spent, and the others' parts are
    -- theirs: back when they are released, or when the window ends.
    if released then retry = max(1, tv) else retry = max(1, tv - release_at) end
  else
    retry = max(1, share_wait())
    if valid >= 0 and retry >= valid and least >= minimum then
      -- The window ends before this member's share makes a batch: what it
      -- leaves of the window would be lost with it. It takes it, in debt.
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

local grant = min(least, cap)
-- (Once a window's parts are released, what is left is anybody's, whole:
-- the window ends soon, and its rest would be stranded in batches.)
if refill > 0 and not (windowed and released) then
  -- Under the fair share a grant is a batch or two (what the bucket made
  -- beyond a whole batch is not lost to rounding): what a member holds
  -- unused at any moment stays small, and its bucket keeps the rest.
  grant = min(grant, max(2 * need, floor(tokens)))
end
if member ~= '' and minimum > 1 and grant - grant % minimum >= need then
  -- A lease for a request of min units: the requests that follow are
  -- likely of min units too, and a remainder below min would wait unused
  -- until it lapses. Whole multiples of min are granted.
  grant = grant - grant % minimum
end
if grant < need then
  -- The decider is the denying limit whose retry_after is longest: need
  -- units fit only once every limit has room.
  local decider, retry, reset = denier(n, S1, S2, S3, AV, need, reserve)
  if paced and paced < need then
    -- Short of the window's paced room: back when it has been made.
    local alg, rate, period, burst = limit(tight)
    local p = cdiv((need - paced + ahead) * pace_len, rate)
    if p > retry then
      decider, retry = tight, p
      reset = ALG[alg].reset(S1[tight], S2[tight], S3[tight], rate, period, burst)
    end
  end
  if need > minimum and grant >= minimum and valid >= 0 and retry >= valid then
    -- A batch would come only after the grant's window has ended: take
    -- what the window has left, rather than strand it.
    need = grant
  else
    -- Denied: charge nothing. Under the fair share, denied by the limit
    -- the shares divide, with others to share it: not back before its
    -- share or the room beyond the others' has made a batch (share_wait).
    -- The others' shares come first, and every member asking again as
    -- soon as a batch is free would poll. A member whose own bucket holds
    -- its batch is owed it: it comes back when the limit has made it
    -- (retry), no later: put off longer, it would leave the limit to fill
    -- up (and a bucket to overflow) meanwhile.
    local ask = retry
    if refill > 0 and members > 1 and decider == tight and tokens < need then
      ask = max(retry, share_wait())
    elseif mkey and refill == 0 and members > 1 and decider == tight then
      -- The members' demands fit in R, yet the limit is empty: a demand
      -- grew faster than its estimate. Back once the limit has made a
      -- batch of this member's demand (at most its part of the capacity),
      -- not for every unit as it frees up, which would poll.
      local b = max(need, min(demand * horizon / TENTH, C / members))
      ask = max(retry, cdiv(b * 1000000, R))
    end
    save(0)
    if limits_deny then
      -- The limits deny the request itself: it is told when they have
      -- room for it, as exact mode tells (a used-up window: its end),
      -- while this member asks again no sooner than its batch.
      decider, retry, reset = denier(n, S1, S2, S3, AV, minimum, reserve)
      return deny(AV[decider], reset, retry, ask, decider)
    end
    return deny(AV[decider], reset, ask, 0, decider, true)
  end
end

-- Phase 2: charge every limit the same grant.
save(grant)
local wait, decider, left, reset = charge_all(n, S1, S2, S3, grant, reserve)
-- Under the fair share, the grant says when this member's bucket holds its
-- next batch (in retry_after): asking sooner would only be denied.
-- (Only with other members: a member alone has nobody to leave room for,
-- and the limits deny it themselves. Less than a millionth of a unit short
-- is rounding, not a wait.)
local next = 0
if refill > 0 and members > 1 and windowed then
  -- From a window: nothing more until the others' parts are released,
  -- once this member's part and the spare are spent.
  if not released and max(0, tokens) + max(0, spare) < minimum then next = max(1, tv - release_at) end
elseif refill > 0 and members > 1 then
  local short_by = need - max(0, tokens) - max(0, spare)
  if short_by > 0.000001 then next = cdiv(short_by * 1000000, refill) end
end
-- (Not past the end of a window of the key's: see deny.)
if valid > 0 and next > valid then next = valid end
return reply(grant, NOW, left, reset, max(0, valid), next, decider - 1, wait, members)
