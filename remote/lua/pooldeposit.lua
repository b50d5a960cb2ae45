-- pooldeposit.lua: a refill's units into a regional pool (pool.lua), and
-- the refill's end.
--
-- KEYS[1]   the pool
-- ARGV[1]   units the global key granted (0: none)
-- ARGV[2]   how long (us) the global key said they may be used, -1: no
--           bound of its own
-- ARGV[3]   the global grant's time (us, the global server's): a refill
--           gives what lapses unused back under it; 0 for a partition's
--           failure-mode share, which nothing gives back
-- ARGV[4]   this server's time (us) when the refill began (poolclaim.lua's
--           now): the units' life counts from then, before the global
--           grant, whatever the two servers' clocks say; and it names the
--           refill that ends (none, if another claimed the pool since)
-- ARGV[5]   the longest a generation lives (us): the regional TTL
-- ARGV[6]   how long (us) before the global key gives this region more:
--           its denial, or its fair share's next batch (0: at once)
-- ARGV[7]   1: the units' life counts from now instead (a partition's
--           share, which no global grant dates: the global call took its
--           timeout to fail)
--
-- Returns the units the pool holds.
local g, valid, at = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local since, ttl, retry = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local key = KEYS[1]
local p = pool_read(key)
local life, from = ttl, since
if ARGV[7] == '1' then from = NOW end
if valid >= 0 and valid < life then life = valid end
if g > 0 and from + life > NOW then
  pool_add(p, g, from + life, at)
elseif g > 0 and at > 0 then
  -- Lapsed on the way: given back by the next refill.
  if p.lu == 0 or at < p.la then p.la = at end
  p.lu = p.lu + g
end
p.ra, p.rd = 0, NOW
-- (Whether the pool was in use since the deposit before: see poolclaim.)
if p.dk > 0 then p.pu = 1 else p.pu = 0 end
p.dk = 0
-- A partition's share dates the region's next one; the global key's answer
-- (which has its time) ends the partition. (A refill ended by Close, with
-- neither, changes nothing.)
if ARGV[7] == '1' then p.rc = NOW elseif at > 0 then p.rc = 0 end
-- The refill ends, unless it outlived its hold and another claimed the
-- pool since (its claim's now is not `since`): that one is in flight.
if p.lc == since then p.lk = 0 end
if retry > 0 then p.ra = NOW + retry end
pool_save(key, p)
return (pool_units(p))
