-- leakybucket.lua: LeakyBucket, a queue of capacity burst drained at exactly
-- rate per period. State is a GCRA TAT (see prelude.lua): the time at which
-- the queue is empty again, i.e. when the next unit's slot begins.
--
-- Two modes (ARGV reserve):
--   admit (0): a request conforms only when the queue is empty (no debt); it
--              then occupies its n slots. Consecutive single units are spaced
--              by exactly period/rate.
--   reserve (1): a request joins the queue if its n units fit in the burst;
--              the reply's wait says how long until its slot. A cancelled
--              wait refunds its exact cost.
ALG[4] = {
  load = gcra_load,

  avail = function(st, lim, now, reserve)
    if reserve == 1 then return gcra_room(st, lim, now) end
    if gcra_debt(st, now) > 0 then return 0 end
    return lim.burst
  end,

  -- Admit: wait until the queue is empty. Reserve: until n units fit.
  retry = function(st, lim, now, n, reserve)
    local d = gcra_debt(st, now)
    if reserve == 1 then return d + gcra_cost(lim, n) - gcra_cap(lim) end
    return d
  end,

  -- The wait for this request is the queue ahead of it.
  take = gcra_take,
  save = gcra_save,
  reset = function(st, lim, now) return gcra_debt(st, now) end,

  -- Cancelling a reservation gives back exactly what it cost.
  refund = function(key, lim, now, g, at)
    gcra_refund(key, lim, now, gcra_cost(lim, g))
  end,
}
