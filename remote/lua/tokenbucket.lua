-- tokenbucket.lua: TokenBucket, as GCRA (see the helpers in prelude.lua).
-- One integer per key, the TAT in us. A full bucket holds burst units and
-- refills at rate per period, so over any run of length T the units granted
-- never exceed burst + rate*T.
ALG[0] = {
  load = gcra_load,

  -- Units grantable now: the room left in the bucket.
  avail = function(st, lim, now, reserve) return gcra_room(st, lim, now) end,

  -- Called only when fewer than n units are available: the debt must fall
  -- until cost(n) fits under the capacity, i.e. by d + cost(n) - cap.
  retry = function(st, lim, now, n, reserve)
    return gcra_debt(st, now) + gcra_cost(lim, n) - gcra_cap(lim)
  end,

  take = function(st, lim, now, g) gcra_take(st, lim, now, g); return 0 end,
  save = gcra_save,

  -- Full again when the debt is paid.
  reset = function(st, lim, now) return gcra_debt(st, now) end,

  -- Refunded units are rounded down: rounding never creates units.
  refund = function(key, lim, now, g, at)
    gcra_refund(key, lim, now, idiv(g * lim.period, lim.rate))
  end,
}
