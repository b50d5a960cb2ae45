-- acquire.lua: grant between min and max units to every limit of one key, or
-- to none (all-or-nothing across the limits).
--
-- KEYS[i]   state key of limit i; all KEYS share one hash tag (one slot)
-- KEYS[n+1] with a member id only: the key's members hash (see below)
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
-- Members. A key leased by several instances keeps a hash of them next to
-- its state: member id -> "expires demand tokens at since" (us, units/s,
-- units, us, us; tokens 'x' for a bucket not kept, which counts as full;
-- since, when it joined, may be missing from an entry an older release
-- wrote). A member
-- counts until `expires`, three horizons after its last lease (at least a
-- second); the hash expires with its last member. Instances that never
-- lease the key cost it nothing.
--
-- Fair share (max-min, as Doorman's): while the members together want more
-- than the key's rate R (the smallest rate of its limits, per second), each
-- gets at most f = min(demand, L), where the level L makes the f add up to
-- R. A member's grants then come out of a bucket of its own that refills at
-- f and holds f/R of the tightest limit's capacity C: the buckets add up to
-- the capacity, so what each holds is also in the limit's room, and no
-- member that asks less often loses its share to those that ask more. The
-- room beyond what the buckets hold (spare) is anybody's, so none is lost
-- while someone wants it. The shares are held to only while the room is
-- short of what the members want over a horizon. A member short of its
-- bucket, or finding the limits short, waits until there is a useful batch
-- (a tenth of a horizon of its share, less for a small burst, or what a window
-- has left), not for every unit as it frees up. While the demand fits in R
-- the member buckets stay full and change nothing.
--
-- Returns ten integers:
--   granted      units charged to every limit; 0 means denied, nothing charged
--   now          the Redis time of the decision, us (a refund names it)
--   decider      1-based index of the limit that decided: when denied, the
--                denying limit that frees up last; when granted, the one with
--                the fewest units left
--   wait         us until the granted units may be used (a leaky bucket's
--                queue); 0 otherwise
--   remaining    units the decider could still grant now
--   retry_after  us until min units could be granted; when granted, 0, or
--                under the fair share the us until this member's own
--                bucket holds its next batch (asking sooner is denied)
--   reset_after  us until the decider is fully replenished
--   valid_for    us the grant may be used for before it lapses (the end of a
--                window or bucket, always > 0), or 0 for no limit of the
--                policy's own, and when denied. (Not -1: go-redis allocates to
--                box an integer reply outside 0..255, on every call.)
--   members      the live members of the key, this one included; 0 when the
--                call names no member
--   blocked      1 when denied because the key is blocked (then decider 1,
--                remaining 0, retry_after and reset_after the block's time
--                left, members 0), else 0
local min, max, reserve = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local member, demand = ARGV[4], tonumber(ARGV[5])
local back, back_at, horizon = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local bkey = KEYS[#KEYS]
-- A batch is a tenth of a horizon of a rate: rate (units/s) * h (us) /
-- TENTH is its size in units.
local TENTH = 10000000
-- From a bucket, the batches together may hold the capacity and an eighth.
local OVER = 1.125
-- A window's members' parts are released for its last 1/RELEASE, its
-- second half: a member that is slow to take its part (a loaded machine)
-- or stopped asking holds it from the others for half a window at most,
-- and the rest is taken while a good part of the window remains, however
-- slow the members' leases come back; a member that asks at all takes its
-- part in the first half.
local RELEASE = 2
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
  if left > 0 then return { 0, NOW, 1, 0, 0, left, left, 0, 0, 1 } end
end

-- Phase 1: read every limit, writing nothing that counts; the grant is the
-- least any limit can give. S1..S3 hold each limit's state, AV its room.
-- R is the key's rate (units/s) and C the capacity of the limit that sets it;
-- valid the least time any limit lets a grant live (-1: none).
local S1, S2, S3, AV, V = {}, {}, {}, {}, {}
local least = max -- the least room of any limit, at most max
local R, C, tight, valid = -1, 0, 1, -1
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local A = ALG[alg]
  local a, b, c = A.load(KEYS[i], rate, period, burst)
  local av = A.avail(a, b, c, rate, period, burst, reserve)
  S1[i], S2[i], S3[i], AV[i] = a, b, c, av
  if av < least then least = av end
  local r = rate * 1000000 / period
  if R < 0 or r < R then R, C, tight = r, burst, i end
  local v = A.valid(a, b, c, rate, period, burst)
  V[i] = v
  if v >= 0 and (valid < 0 or v < valid) then valid = v end
end

-- The key's rate is a window's when its tightest limit is a window whose
-- room comes whole (a fixed window; a sliding window counter's comes as
-- the last window's weight fades, as a bucket's does): tv is the us to
-- that window's end, wlen its length, wstart its start, and its second
-- half (from release_at us before its end) is when the members' parts of it
-- are released (see the fair share below).
local tv = V[tight]
local windowed, wlen, wstart, release_at, released = false, 0, 0, 0, false
do
  local alg = limit(tight)
  windowed = tv >= 0 and ALG[alg].whole == true
end
if windowed then
  local _, _, period = limit(tight)
  wlen = period
  wstart = NOW + tv - wlen
  release_at = math.floor(wlen / RELEASE)
  released = tv <= release_at
end
-- allot(fx) is a member's part of the window at the fair rate fx: f/R of
-- its units (R * wlen / 1e6 of them).
local function allot(fx) return fx * wlen / 1000000 end

-- Members and the fair share: cap is what this member may take now (huge
-- when the demand fits), need the least grant worth its while.
local cap, need, members, refill = math.huge, min, 0, 0
local tokens -- this member's bucket, while the demand exceeds the rate
local bucket = 0 -- the size of this member's bucket
local save = function() return 0 end -- writes this member's entry, less a grant
local spare = 0 -- room no member's bucket claims
local debt = false -- a grant is charged to the bucket in full, into debt
if mkey then
  local ttl = math.max(3 * horizon, 1000000)
  local raw = redis.call('HGETALL', mkey)
  local ds, total, last = { demand }, demand, NOW + ttl
  local at -- when this member's bucket was last written
  -- since: when this member joined the key's members (its entry's last
  -- field; an entry without one counts as joined when last written).
  local since = NOW
  -- settled: every member joined before the current window opened (see
  -- windowed, below).
  local settled = true
  -- The other members' buckets, for what they claim of the room: their
  -- demand, tokens ('x': full) and when those were written, in turn.
  local others = {}
  for j = 1, #raw, 2 do
    local e, d, tk, t, s0 = string.match(raw[j + 1], '^(%d+) (%d+) (%S+) (%d+) ?(%d*)$')
    e = tonumber(e)
    if not e or e <= NOW then
      redis.call('HDEL', mkey, raw[j])
    else
      local joined = tonumber(s0) or tonumber(t)
      if joined >= wstart then settled = false end
      if raw[j] == member then
        since = joined
        -- A bucket of 'x' is not kept (the demand fitted): a full one.
        if tk ~= 'x' then tokens, at = tonumber(tk), tonumber(t) end
      else
        d = tonumber(d)
        ds[#ds + 1], total = d, total + d
        local k = #others
        -- (false, not nil, for a bucket not kept: nil would end the list)
        others[k + 1], others[k + 2], others[k + 3] = d, tonumber(tk) or false, tonumber(t)
        if e > last then last = e end
      end
    end
  end
  if since >= wstart then settled = false end
  -- A window is shared out by parts only among members that all knew of
  -- each other as it opened: in a window where a member joins (the first
  -- of a run, a fleet's restart), the parts of the members already there
  -- would be of a share too large, taken before the newcomer asks. There,
  -- the members' buckets refill as a bucket's, as for any other limit.
  windowed = windowed and settled
  members = #ds
  local f = demand -- this member's fair rate
  if total > R then
    -- Water-filling: the smallest demands are met in full, the rest share
    -- what is left equally; L is that equal part.
    table.sort(ds)
    local left, L = R, R
    for j = 1, #ds do
      L = left / (#ds - j + 1)
      if ds[j] >= L then break end
      left = left - ds[j]
    end
    f = math.min(demand, L)
    local h = horizon
    if valid >= 0 and valid < h then h = valid end
    -- The batch worth waiting for: the share's worth of a tenth of a
    -- horizon (of what is left of the window, for a window): small, so
    -- that what a member holds unused at any time is little, and large
    -- enough that it asks only a few times a horizon; from a bucket, no
    -- more than this member's part of the capacity and an eighth (OVER)
    -- and no more than half of the capacity, so that each batch fits
    -- twice (a small burst is never outwaited) and the batches together
    -- hold little more than the capacity: the bucket does not fill up and
    -- overflow while its members wait for their batches. (The eighth over
    -- saves a tenth of the leases where the capacity sets the batches,
    -- for about half a point of accuracy: docs/leasing.md, "Small
    -- bursts".) (A window that will not have a
    -- batch before it ends gives what it has left: see below.) A member's
    -- bucket holds a batch (at least min): what the buckets hold is kept
    -- from the others, so it is room that waits unused, a tenth of what
    -- the key makes in a horizon in all, little more than its capacity.
    local function size_of(fx, least_grant)
      local b = fx * h / TENTH
      if valid < 0 then b = math.min(b, OVER * fx / R * C, C / 2) end
      return math.floor(b), math.max(least_grant, b)
    end
    local batch, size = size_of(f, min)
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
      size = allot(f)
      if not tokens or at < wstart then tokens = size else tokens = math.min(size, tokens) end
    elseif not tokens then tokens = size else
      tokens = math.min(size, tokens + f * (NOW - at) / 1000000)
    end
    bucket = size
    -- What the buckets hold is kept for their members: a member may take
    -- all the room but what the others' buckets hold, from its own bucket
    -- first; the room beyond every bucket (spare) is anybody's, at no cost
    -- to its bucket. So a member that asks less often than the others
    -- still finds its share, and room that a member leaves unused goes to
    -- those who want it rather than overflow the limit's capacity.
    local claims = 0 -- what the other members' buckets hold
    for j = 1, #others, 3 do
      local fj = math.min(others[j], L)
      local tk = others[j + 1]
      if windowed then
        local aj = allot(fj)
        if tk and others[j + 2] >= wstart then tk = math.min(aj, tk) else tk = aj end
        if released then tk = 0 end
      else
        local _, sj = size_of(fj, 1)
        if tk then tk = math.min(sj, tk + fj * (NOW - others[j + 2]) / 1000000) else tk = sj end
      end
      claims = claims + math.max(0, math.floor(tk)) -- whole units
    end
    local room = math.floor(math.max(0, AV[tight] - claims))
    spare = math.max(0, room - math.max(0, tokens))
    -- The shares are held to only while the room is short (less than the
    -- members want over a horizon). With room to spare, anyone takes what
    -- it asks for, and what it takes beyond its bucket is a debt (down to
    -- the capacity) that it pays off once the room is short: so the
    -- shares hold over time.
    if AV[tight] < total * horizon / 1000000 then
      -- (Its own bucket, too, when the buckets together hold more than
      -- the room: each is at least min, which a small rate's share may
      -- not make. First come, first served then, rather than none.)
      cap = math.max(room, math.floor(math.max(0, tokens)))
      need = math.max(min, math.min(batch, max))
      -- From a window, what is left of the member's part (or, released,
      -- of the window) is worth taking, however little: it does not grow.
      if windowed then need = math.max(min, math.min(need, cap)) end
      refill = f
    else
      debt = true
    end
  else
    tokens = nil -- the demand fits: no bucket of its own
  end
  -- The member entry is written whatever the outcome: the demand counts
  -- even when nothing is granted. A grant is charged to the bucket as far
  -- as the bucket holds it (the rest was spare), or wholly when it is
  -- taken in debt.
  save = function(g)
    local tk = 'x'
    if tokens then
      -- A member in debt pays for spare too: it took its part before.
      local charged = math.min(g, math.max(0, tokens))
      if debt or tokens < 0 then charged = g end
      tk = string.format('%.3f', math.max(-C, tokens - charged))
      tokens = tokens - charged
      spare = spare - (g - charged)
    end
    redis.call('HSET', mkey, member, string.format('%d %d %s %d %d', NOW + ttl, demand, tk, NOW, since))
    redis.call('PEXPIRE', mkey, int(cdiv(last - NOW, 1000)))
  end
  local retry = 0
  if refill > 0 and cap < need and windowed then
    -- The member's part of the window is spent, and the others' parts are
    -- theirs: back when they are released, or when the window ends.
    if released then retry = math.max(1, tv) else retry = math.max(1, tv - release_at) end
  elseif refill > 0 and cap < need then
    retry = math.max(1, cdiv((need - cap) * 1000000, refill))
    if valid >= 0 and retry >= valid and least >= min then
      -- The window ends before this member's share makes a batch: what it
      -- leaves of the window would be lost with it. It takes it, in debt.
      cap, debt = math.huge, true
    end
  end
  if refill > 0 and cap < need then
    -- Denied by the fair share: back once the bucket holds the batch.
    save(0)
    local alg, rate, period, burst = limit(tight)
    local reset = ALG[alg].reset(S1[tight], S2[tight], S3[tight], rate, period, burst)
    return { 0, NOW, tight, 0, AV[tight], retry, reset, 0, members, 0 }
  end
end

local grant = math.min(least, cap)
-- (Once a window's parts are released, what is left is anybody's, whole:
-- the window ends soon, and its rest would be stranded in batches.)
if refill > 0 and not (windowed and released) then
  -- Under the fair share a grant is a batch or two (what the bucket made
  -- beyond a whole batch is not lost to rounding): what a member holds
  -- unused at any moment stays small, and its bucket keeps the rest.
  grant = math.min(grant, math.max(2 * need, math.floor(tokens)))
end
if member ~= '' and min > 1 and grant - grant % min >= need then
  -- A lease for a request of min units: the requests that follow are
  -- likely of min units too, and a remainder below min would wait unused
  -- until it lapses. Whole multiples of min are granted.
  grant = grant - grant % min
end
if grant < need then
  -- The decider is the denying limit whose retry_after is longest: need
  -- units fit only once every limit has room.
  local decider, retry, reset = denier(n, S1, S2, S3, AV, need, reserve)
  if need > min and grant >= min and valid >= 0 and retry >= valid then
    -- A batch would come only after the grant's window has ended: take
    -- what the window has left, rather than strand it.
    need = grant
  else
    -- Denied: charge nothing. Under the fair share, denied by the limit
    -- the shares divide, with others to share it: not back before the
    -- member's share has made a batch. The others' shares come first, and
    -- every member asking again as soon as a batch is free would poll.
    -- A member whose bucket is more than half full has been getting less
    -- than its share: it comes back in half that time, ahead of the others.
    -- From a bucket, a member whose own bucket holds its batch is owed it:
    -- it comes back when the limit has made it (retry), no later. (The
    -- batches may hold more than the capacity together, see size_of; a
    -- member put off by a whole batch would leave the limit to fill up
    -- and overflow meanwhile.)
    if refill > 0 and members > 1 and decider == tight and (valid >= 0 or tokens < need) then
      local wait = cdiv(need * 1000000, refill)
      if tokens >= bucket / 2 then wait = cdiv(wait, 2) end
      retry = math.max(retry, wait)
    elseif mkey and refill == 0 and members > 1 and decider == tight then
      -- The members' demands fit in R, yet the limit is empty: a demand
      -- grew faster than its estimate. Back once the limit has made a
      -- batch of this member's demand (at most its part of the capacity),
      -- not for every unit as it frees up, which would poll.
      local b = math.max(need, math.min(demand * horizon / TENTH, C / members))
      retry = math.max(retry, cdiv(b * 1000000, R))
    end
    save(0)
    return { 0, NOW, decider, 0, AV[decider], math.max(1, retry), reset, 0, members, 0 }
  end
end

-- Phase 2: charge every limit the same grant.
save(grant)
local wait, decider, left, reset = 0, 1, -1, 0
for i = 1, n do
  local alg, rate, period, burst = limit(i)
  local A = ALG[alg]
  local a, b, c, w = A.commit(KEYS[i], S1[i], S2[i], S3[i], rate, period, burst, grant)
  if w > wait then wait = w end
  local l = A.avail(a, b, c, rate, period, burst, reserve)
  local r = A.reset(a, b, c, rate, period, burst)
  if left < 0 or l < left or (l == left and r > reset) then
    decider, left, reset = i, l, r
  end
end
-- Under the fair share, the grant says when this member's bucket holds its
-- next batch (in retry_after): asking sooner would only be denied.
-- (Only with other members: a member alone has nobody to leave room for,
-- and the limits deny it themselves. Less than a millionth of a unit short
-- is rounding, not a wait.)
local next = 0
if refill > 0 and members > 1 and windowed then
  -- From a window: nothing more until the others' parts are released,
  -- once this member's part and the spare are spent.
  if not released and math.max(0, tokens) + math.max(0, spare) < min then next = math.max(1, tv - release_at) end
elseif refill > 0 and members > 1 then
  local short_by = need - math.max(0, tokens) - math.max(0, spare)
  if short_by > 0.000001 then next = cdiv(short_by * 1000000, refill) end
end
return { grant, NOW, decider, wait, left, next, reset, math.max(0, valid), members, 0 }
