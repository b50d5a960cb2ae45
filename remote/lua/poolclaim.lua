-- poolclaim.lua: whether the caller refills a regional pool (pool.lua) from
-- the global Redis, decided in the region's Redis so that one refill of a
-- key is in flight per region.
--
-- KEYS[1]   the pool
-- KEYS[2]   the pool's members hash (members.lua): the region's instances
-- ARGV[1]   low: the pool wants a refill while it holds fewer units, or
--           fewer than its region takes over ARGV[4] us, if more; 0: a
--           refill ahead of need (a decision's low water, or a timer's
--           wake), which refills only a pool in use
--           (its instances want units, or its region took some since its
--           last deposit: twice, or once after taking some since the
--           deposit before), not one whose key nobody uses any more, nor
--           one used once (a per-IP limit under a crawl: its one decision
--           set the refill off and took from its deposit)
-- ARGV[2]   how long (us) the refill may take before another may start
-- ARGV[3]   how long (us) the refill is expected to take: an empty pool
--           tells its instances to ask again then
-- ARGV[4]   the lead (us): how long ahead of need a pool is refilled
-- ARGV[5]   the gap (us): a pool that holds units is refilled no sooner
--           than this after its last deposit
--
-- Returns "status units demand taken lapsed lapsed_at now wait cut", where
-- status is
--   1  the caller refills: it holds the refill until it deposits
--      (pooldeposit.lua) or the time runs out, and gives the lapsed units
--      (granted by the global key at lapsed_at) back to it
--   0  another refill is in flight, for wait us more
--   2  the global key gives this region nothing more for wait us (it
--      denied the last refill, or its share's next batch is not due)
--   3  the pool holds low units or more, or its last deposit was less
--      than the gap ago: no refill (before wait us more, then)
-- units: what the pool holds; demand: the region's units per second,
-- rounded up: what its instances say they want (members.lua), or, where
-- none says (exact mode), what they took lately; taken: what they took
-- lately (units/s, rounded up), which sizes the refill; now: this server's time (us), which the deposit dates from;
-- cut: when the last partition's failure-mode share landed (us, 0: the
-- global key answered the last refill).
local low, hold, eta = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local key = KEYS[1]
local p = pool_read(key)
local units = pool_units(p)
local taken = pool_demand(p)
low = max(low, ceil(taken * tonumber(ARGV[4]) / 1000000))
local wanted = read_members(KEYS[2], '#', 0, 1).D
local demand, t = ceil(max(taken, wanted)), ceil(taken)
if tonumber(ARGV[1]) == 0 then
  if wanted > 0 or p.dk > 1 or p.dk == 1 and p.pu == 1 then low = max(low, 1) else low = 0 end
end
if p.ra > NOW then return format('2 %d %d %d 0 0 %d %d %d', units, demand, t, NOW, p.ra - NOW, p.rc) end
if units >= low then return format('3 %d %d %d 0 0 %d 0 %d', units, demand, t, NOW, p.rc) end
local gap = p.rd + tonumber(ARGV[5]) - NOW
if units > 0 and gap > 0 then return format('3 %d %d %d 0 0 %d %d %d', units, demand, t, NOW, gap, p.rc) end
if p.lk > NOW then return format('0 %d %d %d 0 0 %d %d %d', units, demand, t, NOW, max(1, p.re - NOW), p.rc) end
local lu, la = p.lu, p.la
p.lk, p.re, p.lc, p.lu, p.la = NOW + hold, NOW + eta, NOW, 0, 0
pool_save(key, p)
return format('1 %d %d %d %d %d %d 0 %d', units, demand, t, lu, la, NOW, p.rc)
