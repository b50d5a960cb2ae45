-- pool.lua: Pool, a region's part of a worldwide key (docs/regions.md).
-- The key lives in the region's Redis; its units come from the global
-- Redis in deposits (pooldeposit.lua), each a generation that lapses at its
-- expiry, and the region's instances take them as from any limit. The key
-- is a hash:
--   g   the generations, "u e a o" each (units left, expiry us in this
--       server's time, the global grant's time us in the global server's,
--       units it was given), ';'-separated, soonest expiry first
--   lu, la  units of generations that lapsed unused, and the earliest of
--       their global grants' times: the next refill gives them back
--   lx  the latest expiry of a generation that lapsed (see refund); a
--       key made afresh starts it at its making: what came before (a key
--       that expired, or was reset) lapsed
--   ra  this server's time (us) until which the global key gives this
--       region nothing more: it denied, or its fair share's next batch is
--       not due
--   lk  this server's time (us) until which a refill is in flight,
--   re  when it is expected to land, and
--   lc  when it was claimed: only its own deposit ends it
--   rd  when the last deposit landed
--   rc  when the last partition's failure-mode share landed (0 once the
--       global key answers a refill): the region's, whichever instance
--       deposited it
--   dw, dc, dp  the second (floor(now / 1s)) units were last taken in, the
--       units taken in it and in the second before: the region's demand
--   dk  the takes since the last deposit (calls, not units), and
--   pu  1 when the pool was taken from between the deposit before and
--       the last: whether a timer's wake refills it (poolclaim.lua)
-- The limit's rate, period and burst are the worldwide key's tightest
-- limit's: the fair share between the region's instances reads them.
-- State: a = units held by live generations, b = the soonest expiry of one
-- that holds units (0: none), c unused. The parsed hash of the last load
-- is kept in PL (a call reads one pool key).
local PL

local function pool_read(key)
  local v = call('HMGET', key, 'g', 'lu', 'la', 'ra', 'lk', 'dw', 'dc', 'dp', 'lx', 're', 'rd', 'lc', 'rc', 'dk', 'pu')
  local p = { gens = {}, lu = tonumber(v[2]) or 0, la = tonumber(v[3]) or 0,
    ra = tonumber(v[4]) or 0, lk = tonumber(v[5]) or 0, dw = tonumber(v[6]) or 0,
    dc = tonumber(v[7]) or 0, dp = tonumber(v[8]) or 0, lx = tonumber(v[9]) or 0,
    re = tonumber(v[10]) or 0, rd = tonumber(v[11]) or 0, lc = tonumber(v[12]) or 0,
    rc = tonumber(v[13]) or 0, dk = tonumber(v[14]) or 0, pu = tonumber(v[15]) or 0 }
  -- (No key: its generations, and the record of their lapse, are gone.
  -- A grant made before now came from one of them.)
  if not v[1] then p.lx = NOW end
  for u, e, a, o in gmatch(v[1] or '', '(%d+) (%d+) (%d+) (%d+)') do
    u, e, a = tonumber(u), tonumber(e), tonumber(a)
    if e > NOW then
      p.gens[#p.gens + 1] = { u, e, a, tonumber(o) }
    else
      if e > p.lx then p.lx = e end
      if u > 0 and a > 0 then
        -- Lapsed unused: given back to the global key by the next refill
        -- (not a partition's, which the global key never granted).
        if p.lu == 0 or a < p.la then p.la = a end
        p.lu = p.lu + u
      end
    end
  end
  return p
end

-- Units held, and the soonest expiry of a generation holding some (0: none).
local function pool_units(p)
  local u, soonest, gens = 0, 0, p.gens
  for i = 1, #gens do
    local g = gens[i]
    if g[1] > 0 then
      u = u + g[1]
      if soonest == 0 then soonest = g[2] end
    end
  end
  return u, soonest
end

-- The region's demand, units per second: the last second's units and this
-- one's so far, the last weighed by the part of it still in the window.
local function pool_demand(p)
  local s = idiv(NOW, 1000000)
  local cur, prev = 0, 0
  if p.dw == s then cur, prev = p.dc, p.dp elseif p.dw == s - 1 then prev = p.dc end
  return prev * (1 - (NOW % 1000000) / 1000000) + cur
end

-- How long (us) until the pool has units again, as far as it knows: the
-- global key's wait, or a refill's expected landing; else 0.
local function pool_wait(p)
  if p.ra > NOW then return p.ra - NOW end
  if p.lk > NOW and p.re > NOW then return p.re - NOW end
  return 0
end

local function pool_save(key, p)
  local parts, last, gens = {}, NOW, p.gens
  for i = 1, #gens do
    local g = gens[i]
    -- (Kept while empty too: its expiry, once passed, is lx.)
    parts[i] = format('%d %d %d %d', g[1], g[2], g[3], g[4])
    if g[2] > last then last = g[2] end
  end
  if p.ra > last then last = p.ra end
  if p.lk > last then last = p.lk end
  if p.lk <= NOW then p.re = 0 end
  call('HSET', key, 'g', concat(parts, ';'), 'lu', int(p.lu), 'la', int(p.la), 'ra', int(p.ra),
    'lk', int(p.lk), 'dw', int(p.dw), 'dc', int(p.dc), 'dp', int(p.dp), 'lx', int(p.lx), 're', int(p.re), 'rd', int(p.rd),
    'lc', int(p.lc), 'rc', int(p.rc), 'dk', int(p.dk), 'pu', int(p.pu))
  -- Kept a few seconds past its last generation, for the demand and what
  -- lapsed to be read by the next refill.
  expire_in(key, last - NOW + 5000000)
end

-- Adds a generation of g units that expire at e (global grant time a),
-- in order of expiry.
local function pool_add(p, g, e, a)
  local gens, i = p.gens, #p.gens
  while i > 0 and gens[i][2] > e do
    gens[i + 1] = gens[i]
    i = i - 1
  end
  gens[i + 1] = { g, e, a, g }
end

ALG[6] = {
  load = function(key)
    PL = pool_read(key)
    local u, soonest = pool_units(PL)
    return u, soonest, 0
  end,

  avail = function(u) return u end,

  -- When the pool has units again: the global key's, when it gives this
  -- region nothing more for a while; a refill's, when one is on its way;
  -- else a millisecond (see reset).
  retry = function()
    return max(1000, pool_wait(PL))
  end,

  -- Soonest expiry first, so that what is held lapses last. The units
  -- count toward the region's demand.
  commit = function(key, u, _, _, _, _, _, g)
    local left, gens = g, PL.gens
    for i = 1, #gens do
      local x = gens[i]
      local t = min(left, x[1])
      x[1], left = x[1] - t, left - t
      if left == 0 then break end
    end
    local s = idiv(NOW, 1000000)
    if PL.dw == s then
      PL.dc = PL.dc + g
    else
      if PL.dw == s - 1 then PL.dp = PL.dc else PL.dp = 0 end
      PL.dw, PL.dc = s, g
    end
    PL.dk = PL.dk + 1
    pool_save(key, PL)
    local _, soonest = pool_units(PL)
    -- (A charge past what it holds takes what it holds: a worldwide cost
    -- is charged to the global key, never to a pool.)
    return max(0, u - g), soonest, 0, 0
  end,

  -- When the pool has units again, if it ever had any: the global key's
  -- wait when it holds the region back, a refill's when one is on its way.
  -- Else 0: a pool never filled (a cold key), or one that no refill fills
  -- yet; the engine fills it and waits (docs/regions.md).
  reset = function()
    if PL.rd == 0 and PL.ra <= NOW then return 0 end
    return pool_wait(PL)
  end,

  owed = function() return 0 end,

  -- A grant lives no longer than the generation it came from.
  valid = function(_, soonest)
    if soonest == 0 then return -1 end
    return soonest - NOW
  end,

  -- No pacing or parts of a window: a pool's units come in generations.
  pool = true,

  -- Back into the generation that ends soonest, never one that ends later
  -- than the one they came from: a grant made at `at` took from the
  -- generation that ended soonest then, so while none that was live at
  -- `at` has lapsed (lx <= at), it is live, and no live one ends before
  -- it. Otherwise they are dropped: a unit never outlives its generation.
  -- Nor does a generation come to hold more than it was given (what is
  -- given back twice, or was never taken, is dropped).
  refund = function(key, _, _, _, g, at)
    local p = pool_read(key)
    if at < p.lx or #p.gens == 0 then return end
    local x = p.gens[1]
    x[1] = min(x[4], x[1] + g)
    pool_save(key, p)
  end,
}
