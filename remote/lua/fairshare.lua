-- fairshare.lua: the max-min fair share of a key's rate among its members
-- (members.lua), and each member's bucket under it: the one place the
-- share is computed, for acquire.lua, and the water level for permit.lua.
-- docs/scripts.md tells the model and why each constant is what it is.
--
-- Floats: the fair rates and the members' buckets are fractions of a unit.
-- They decide which member may take how much of the room, never how much
-- room there is: every grant is whole units, charged to the limits'
-- integer state, which alone enforces the bound.

-- A batch is a tenth of a horizon of a share: rate (units/s) * h (us) / TENTH.
local TENTH = 10000000
-- From a bucket, a batch is at most this part of the member's part of the
-- capacity, so that the key's bucket is half full when every batch is due.
local PART = 0.5
-- The batch of this call: a regional pool's refill (acquire.lua's reserve
-- 2) is a whole horizon of the member's share, up to its whole part of the
-- capacity, so that a region crosses to the global Redis about once a
-- horizon (docs/regions.md). Set by each call (set_part).
local part, tenth = PART, TENTH
local function set_part(refill)
  if refill then part, tenth = 1, 1000000 else part, tenth = PART, TENTH end
end
-- A window's parts are released for its last 1/RELEASE.
local RELEASE = 2
-- From a window, a member waits for at least a 1/EXCESS part of a batch;
-- acquire.lua paces a window only while the demand passes the rate by
-- a 1/EXCESS part.
local EXCESS = 4

-- The level L of the water-filling of demands to R: the smallest are met
-- in full, the rest share what is left equally. cs: the demand classes
-- { mean, count, sum } (members.lua's classes(M)); a class counts as
-- members of its mean demand; cs.sorted: cs comes sorted by mean (no two
-- alike), as classes(M) makes it.
local function water_level(cs, R)
  if not cs.sorted then sort(cs, function(x, y) return x[1] < y[1] end) end
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

-- Past CROWD members a batch grows with them, up to LONGEST times, so that
-- the key's calls stay those of CROWD members.
local CROWD, LONGEST = 16, 5
local function crowd(members) return min(LONGEST, max(1, members / CROWD)) end

-- The batch worth waiting for at the fair rate fx by a member whose demand
-- is dx, and the size of the bucket that holds a whole one (at least
-- least_grant units): a tenth of a horizon h of the share (crowd); from a
-- bucket (valid < 0) at most PART of the member's part of the capacity C;
-- from a window, a part of a whole one below 2 fx (EXCESS).
local function batch_size(dx, fx, least_grant, h, valid, R, C, members)
  local b = fx * h / tenth * crowd(members)
  if valid < 0 then
    b = min(b, part * fx / R * C)
    return floor(b), max(least_grant, b)
  end
  local wait = b * min(1, max(1 / EXCESS, (dx - fx) / fx))
  return floor(wait), max(least_grant, b)
end

-- A member's part of a window of wlen us at the fair rate fx: f/R of its
-- units (R * wlen / 1e6 of them).
local function allot(fx, wlen) return fx * wlen / 1000000 end

-- From a bucket (valid < 0), the others' buckets keep their units from
-- this member for LAPSE times their batch's time (a bucket's size over
-- its fair rate) after their last lease, no longer: the bucket of a
-- member whose demand stopped would hold back the room from those still
-- asking until the key's bucket filled and overflowed. (A window's room
-- does not overflow: it ends.) A generation's buckets lapse together,
-- once the last lease into it by any other member (L1, or L2 when this
-- member made L1) is LAPSE of its longest batch time (B) old: a member
-- still leasing keeps its generation's buckets, the idle ones among them
-- too, until the generation ends.
local LAPSE = 3
local function lapsed(M, g, valid)
  if valid >= 0 or g.B <= 0 then return false end
  local last = g.L1
  if M.last == last then last = g.L2 end
  return NOW - last > LAPSE * g.B
end

-- What the other members' buckets hold now (whole units) at the level L,
-- f this member's fair rate, how fast those not yet full refill, and the
-- fair rates of those that did not lapse (units/s). From a window (wlen >
-- 0): what is left of their parts of the window that started at wstart,
-- nothing once released. Else the generations' sums (members.lua), never
-- more than the buckets' sizes, but those that lapsed.
local function claims_of(M, cs, L, f, wlen, wstart, released, h, valid, R, C)
  local others = fair_sum(cs, L) - f
  if wlen > 0 then
    if released then return 0, 0, others end
    local used = 0
    if M.uw == wstart then used = M.U end
    return max(0, floor(allot(others, wlen) - used)), 0, others
  end
  local claims, growth, live = 0, 0, 0
  for k = 1, #M.gens do
    local g = M.gens[k]
    if not lapsed(M, g, valid) then
      live = live + max(0, g.F)
      local fill = g.T + g.F * (NOW - g.start) / 1000000 - g.FT
      if fill < g.Z then growth = growth + max(0, g.F) else fill = g.Z end
      claims = claims + max(0, fill)
    end
  end
  local _, per_rate = batch_size(1, 1, 0, h, valid, R, C, M.n)
  return floor(min(claims, per_rate * others)), min(growth, others), min(live, others)
end

-- A member's bucket now: tokens (nil: none yet) as written at `at`, of
-- size units, refilled at its fair rate f. A window's part (windowed) is
-- whole from the window's start (wstart). A debt taken from a whole window
-- is that window's: it is not owed from the next.
local function refill_bucket(tokens, at, f, size, windowed, whole, wstart)
  if windowed then
    if not tokens or at < wstart then return size end
    return min(size, tokens)
  end
  if not tokens then return size end
  local since = at
  if whole and at < wstart and tokens < 0 then tokens, since = 0, wstart end
  return min(size, tokens + f * (NOW - since) / 1000000)
end

-- Charges a grant of g to a bucket (tokens, nil for none) as far as it
-- holds it, the rest being spare; wholly in debt (debt, or a bucket already
-- below 0). Returns the bucket as kept (never below -C), the bucket, and
-- what of g came from the spare.
local function charge_bucket(tokens, g, debt, C)
  if not tokens then return nil, nil, 0 end
  local charged = min(g, max(0, tokens))
  if debt or tokens < 0 then charged = g end
  return max(-C, tokens - charged), tokens - charged, g - charged
end

-- The us until a member may have need units: when its bucket (tokens,
-- refilling at f) holds them, or the room beyond the others' buckets
-- (room, growing at room_rate) does, whichever is first. (Waiting for its
-- own bucket alone, every member would leave that room unused.)
local function share_wait(need, tokens, f, room, room_rate)
  local own = cdiv((need - max(0, tokens)) * 1000000, f)
  return min(own, cdiv((need - room) * 1000000, room_rate))
end

-- The us until a member's bucket and the spare hold its next batch (need
-- units) at its fair rate f; 0 when they do (a millionth of a unit short
-- is rounding).
local function next_batch(need, tokens, spare, f)
  local short_by = need - max(0, tokens) - max(0, spare)
  if short_by > 0.000001 then return cdiv(short_by * 1000000, f) end
  return 0
end
