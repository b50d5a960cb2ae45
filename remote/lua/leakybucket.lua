-- leakybucket.lua: LeakyBucket, a queue of capacity burst drained at exactly
-- rate per period. State a = D, a GCRA debt (gcra.lua): the time until the
-- queue is empty, i.e. until the next unit's slot begins.
--
-- Two modes (ARGV reserve):
--   admit (0): a request conforms only when the queue is empty (no debt); it
--              then occupies its n slots. Consecutive single units are spaced
--              by exactly period/rate.
--   reserve (1): a request joins the queue if its n units fit in the burst;
--              the reply's wait says how long until its slot. A cancelled
--              wait refunds exactly its cost.
ALG[4] = {
  load = gcra_load,

  avail = function(D, _, _, rate, period, burst, reserve)
    if reserve == 1 then return gcra_room(D, period, burst) end
    if D > 0 then return 0 end
    return burst
  end,

  -- Admit: wait until the queue is empty. Reserve: until n units fit.
  retry = function(_, D, _, _, rate, period, burst, n, reserve)
    if reserve == 1 then return gcra_until(D, rate, (burst - n) * period) end
    return gcra_until(D, rate, 0)
  end,

  -- The wait for this request is the queue ahead of it.
  commit = function(key, D, _, _, rate, period, _, g)
    local D2, wait = gcra_commit(key, D, rate, period, g)
    return D2, 0, 0, wait
  end,

  reset = function(D, _, _, rate) return gcra_until(D, rate, 0) end,

  -- The queue beyond its burst.
  owed = function(D, _, _, _, period, burst) return gcra_owed(D, period, burst) end,

  -- Never leased (its grants are used at once): no limit.
  valid = function() return -1 end,

  refund = function(key, rate, period, _, g) gcra_refund(key, rate, period, g) end,
}
