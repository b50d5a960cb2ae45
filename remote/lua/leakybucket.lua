-- leakybucket.lua: LeakyBucket, a queue of capacity burst drained at exactly
-- rate per period. State is a GCRA debt (see prelude.lua): the time until
-- the queue is empty, i.e. until the next unit's slot begins.
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

  avail = function(st, lim, now, reserve)
    if reserve == 1 then return gcra_room(st, lim) end
    if st.D > 0 then return 0 end
    return lim.burst
  end,

  -- Admit: wait until the queue is empty. Reserve: until n units fit.
  retry = function(st, lim, now, n, reserve)
    if reserve == 1 then return gcra_until(st, lim, (lim.burst - n) * lim.period) end
    return gcra_until(st, lim, 0)
  end,

  -- The wait for this request is the queue ahead of it.
  take = gcra_take,
  save = gcra_save,
  reset = function(st, lim, now) return gcra_until(st, lim, 0) end,

  refund = function(key, lim, now, g, at) gcra_refund(key, lim, now, g) end,
}
