-- tokenbucket.lua: TokenBucket, as GCRA with an exact debt (gcra.lua).
-- State a = D. A full bucket holds burst units and refills at rate per
-- period, so over any span T the units granted never exceed
-- burst + rate*T/period, with no rounding drift.
ALG[0] = {
  load = gcra_load,

  avail = function(D, _, _, rate, period, burst) return gcra_room(D, period, burst) end,

  -- n fit once the debt falls to (burst - n) * period.
  retry = function(_, D, _, _, rate, period, burst, n)
    return gcra_until(D, rate, (burst - n) * period)
  end,

  commit = function(key, D, _, _, rate, period, _, g)
    return gcra_commit(key, D, rate, period, g), 0, 0, 0
  end,

  reset = function(D, _, _, rate) return gcra_until(D, rate, 0) end,

  -- A leased unit left the bucket for good: no limit of its own (the
  -- lease TTL bounds it).
  valid = function() return -1 end,

  -- Aged: leased units come back late (at expiry), see gcra_refund_aged.
  refund = function(key, rate, period, _, g, at) gcra_refund_aged(key, rate, period, g, at) end,
}
