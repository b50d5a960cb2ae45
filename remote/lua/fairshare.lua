-- fairshare.lua: the max-min fair share of a key's rate among its members
-- (members.lua), for acquire.lua.
--
-- While the members together want more than the key's rate R (the smallest
-- rate of its limits, per second), each gets at most f = min(demand, L),
-- where the level L makes the f add up to R (Doorman's max-min share). A
-- member's grants then come out of a bucket of its own that refills at f
-- and holds a batch: what the buckets hold is kept from the others, so no
-- member that asks less often loses its share to those that ask more. The
-- room beyond what the buckets hold (spare) is anybody's, so none is lost
-- while someone wants it. While the demand fits in R the member buckets stay
-- full and change nothing.
--
-- Floats. The fair rates (L, f) and the member buckets are fractions of a
-- unit, and a bucket is stored to a thousandth of one (members.lua). This is
-- the one place floats appear, and it is harmless to the bound: the buckets
-- decide only which member may take how much of the room, never how much
-- room there is. Every grant is a whole number of units (math.floor),
-- charged to the limits' integer state, which alone enforces the bound; a
-- rounding error moves at most a unit from one member's turn to another's.

-- A batch is a tenth of a horizon of a share: rate (units/s) * h (us) /
-- TENTH is its size in units. Small, so that what a member holds unused at
-- any time is little; large enough that it asks only about ten times a
-- horizon.
local TENTH = 10000000
-- From a bucket, a member's batch is at most half its part of the capacity
-- (PART): when every member's batch is due at once, as in a flood, the key's
-- bucket is then half full, not full, and members that come back late (a
-- loaded machine, a slow reply) find it still filling, with half the
-- capacity's worth of time (C / 2R) to spare, rather than overflowing. Batches
-- of a whole part would ask half as often, and lose what the bucket makes
-- past its capacity while the last member is on its way.
local PART = 0.5
-- A window's members' parts are released for its last 1/RELEASE, its second
-- half: a member that is slow to take its part (a loaded machine) or stopped
-- asking holds it from the others for half a window at most, and the rest is
-- taken while a good part of the window remains, however slow the members'
-- leases come back; a member that asks at all takes its part in the first
-- half.
local RELEASE = 2
-- How far a demand must pass what it may have before waiting for a batch of
-- a window costs it nothing. From a window a member waits for a part
-- (d - f) / f of a batch, d its demand and f its fair rate: a whole one at
-- twice its share or more, and never less than a 1/EXCESS part (at its
-- share, or below it). Waiting costs a member demand only when it wants
-- about what it may have: a demand far past its share is mostly denied
-- anyway, and what the limit made meanwhile is taken whole when it comes
-- back; a demand at its share (a lone member whose demand is the key's
-- rate, members whose demands add up to it; a measured demand, noisy, a
-- little above) would be denied the while the window makes a batch, each
-- time it runs dry, where exact mode takes each unit as it is made, and
-- what the window made and nobody took lapses with it. The smaller part
-- costs such a member up to EXCESS times the calls. From a bucket the wait
-- is a whole batch: what the bucket makes meanwhile stays in it (up to its
-- capacity) for the member's next lease, and the calls stay few.
-- (acquire.lua paces a window where members meet only while they want more
-- than the rate by a 1/EXCESS part.)
local EXCESS = 4

-- The level L of the water-filling of the members' demands to R (their
-- classes, members.lua's classes(M)): the smallest demands are met in full,
-- the rest share what is left equally. A class counts as members of its
-- mean demand: within a factor 2^(1/8) of each one's own.
local function water_level(cs, R)
  sort(cs, function(x, y) return x[1] < y[1] end)
  local left, k, L = R, 0, R
  for j = 1, #cs do k = k + cs[j][2] end
  for j = 1, #cs do
    L = left / k
    if cs[j][1] >= L then break end
    left, k = left - cs[j][3], k - cs[j][2]
  end
  return L
end

-- The sum of every member's fair rate, min(demand, L), from the classes.
local function fair_sum(cs, L)
  local sum = 0
  for j = 1, #cs do
    local c = cs[j]
    if c[1] <= L then sum = sum + c[3] else sum = sum + c[2] * L end
  end
  return sum
end

-- A key's members lease about TENTH/h times a horizon h each while they
-- are held to their shares: their calls grow with them. Past CROWD members
-- a batch is crowd(members) times larger, so that the key's calls stay
-- those of CROWD members, up to LONGEST times (a batch of half a horizon
-- of the share, which a member still uses well within its lease's life);
-- past CROWD * LONGEST members the calls grow again, five times slower.
-- What the batches hold unused at any time stays a share's worth of a
-- tenth of a horizon for each of CROWD members, little of the key's rate.
local CROWD, LONGEST = 16, 5
local function crowd(members) return min(LONGEST, max(1, members / CROWD)) end

-- The batch worth waiting for at the fair rate fx by a member whose demand
-- is dx (from a window, a part of a whole one below 2 fx: EXCESS), and the
-- size of the bucket that holds a whole one (at least least_grant units). A batch is the share's
-- worth of a tenth of a horizon h (of what is left of the window, for a
-- window); from a bucket (valid < 0) no more than half the member's part of
-- the capacity C (PART), so that the batches together hold half of C: the
-- bucket does not fill up and overflow while its members come back for
-- their batches, and a member alone (whose part is all of C) has a batch
-- that fits twice, so that a small burst is never outwaited. Among more
-- than CROWD members the batch grows with them (crowd), so that the key
-- is asked about as often as by CROWD members, not once more for each one.
local function batch_size(dx, fx, least_grant, h, valid, R, C, members)
  local b = fx * h / TENTH * crowd(members)
  if valid < 0 then
    b = min(b, PART * fx / R * C)
    return floor(b), max(least_grant, b)
  end
  local wait = b * min(1, max(1 / EXCESS, (dx - fx) / fx))
  return floor(wait), max(least_grant, b)
end

-- A member's part of a window of wlen us at the fair rate fx: f/R of its
-- units (R * wlen / 1e6 of them).
local function allot(fx, wlen) return fx * wlen / 1000000 end

-- What the other members' buckets hold now (whole units), at the level L,
-- f this member's fair rate: kept from this member. For a window (wlen >
-- 0), each holds what is left of its part of the window that started at
-- wstart (its allotment at the level L, less what it took of it), nothing
-- once released. Otherwise each refilled at its fair rate since written,
-- up to its size: read from the generations' sums (members.lua), which
-- count a generation's buckets as one (a full one makes up for an empty
-- one's room), and never more than the buckets' sizes at the level L
-- (a bucket's size is proportional to its fair rate: batch_size). Returns
-- also how fast the buckets not yet full refill (units/s).
local function claims_of(M, cs, L, f, wlen, wstart, released, h, valid, R, C)
  local others = fair_sum(cs, L) - f
  if wlen > 0 then
    if released then return 0, 0 end
    local used = 0
    if M.uw == wstart then used = M.U end
    return max(0, floor(allot(others, wlen) - used)), 0
  end
  local claims, growth = 0, 0
  for k = 1, #M.gens do
    local g = M.gens[k]
    local fill = g.T + g.F * (NOW - g.start) / 1000000 - g.FT
    if fill < g.Z then growth = growth + max(0, g.F) else fill = g.Z end
    claims = claims + max(0, fill)
  end
  local _, per_rate = batch_size(1, 1, 0, h, valid, R, C, M.n)
  return floor(min(claims, per_rate * others)), min(growth, others)
end
