-- tokenbucket.lua: TokenBucket, as GCRA with an exact debt (see the helpers
-- in prelude.lua). A full bucket holds burst units and refills at rate per
-- period, so over any span T the units granted never exceed
-- burst + rate*T/period, with no rounding drift.
ALG[0] = {
  load = gcra_load,

  -- Units grantable now: the room left in the bucket.
  avail = function(st, lim, now, reserve) return gcra_room(st, lim) end,

  -- Called only when fewer than n units fit: wait until the debt falls to
  -- (burst - n) * period.
  retry = function(st, lim, now, n, reserve)
    return gcra_until(st, lim, (lim.burst - n) * lim.period)
  end,

  take = function(st, lim, now, g) gcra_take(st, lim, now, g); return 0 end,
  save = gcra_save,

  -- Full again when the debt is paid.
  reset = function(st, lim, now) return gcra_until(st, lim, 0) end,

  refund = function(key, lim, now, g, at) gcra_refund(key, lim, now, g) end,
}
