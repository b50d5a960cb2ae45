-- tokenbucket.lua: TokenBucket, as GCRA with an exact debt (gcra.lua).
-- State a = D. A full bucket holds burst units and refills at rate per
-- period, so over any span T the units granted never exceed
-- burst + rate*T/period, with no rounding drift.
--
-- Reserve (ARGV reserve 1, exact-mode WaitN, as x/time/rate's): a request
-- takes its units ahead of time and the reply's wait says when they
-- conform (the debt is back within the capacity). Used then, they follow
-- the bucket's own schedule, so the bound holds however many wait; a
-- cancelled wait refunds them. Up to a burst or a period's rate of units,
-- whichever is more, may wait beyond what the bucket holds (fewer where
-- the debt would reach 2^53); beyond that a waiter is denied, and the
-- first waiter of each instance asks again at each refill.
local function tb_queued(rate, period, burst)
  return burst + min(max(burst, rate), floor(9007199254740991 / period) - burst)
end

ALG[0] = {
  load = gcra_load,

  avail = function(D, _, _, rate, period, burst, reserve)
    if reserve == 1 then return gcra_room(D, period, tb_queued(rate, period, burst)) end
    return gcra_room(D, period, burst)
  end,

  -- n fit once the debt falls to (burst - n) * period (reserve: the queue
  -- more).
  retry = function(_, D, _, _, rate, period, burst, n, reserve)
    if reserve == 1 then return gcra_until(D, rate, (tb_queued(rate, period, burst) - n) * period) end
    return gcra_until(D, rate, (burst - n) * period)
  end,

  -- The wait: until the debt is back within the capacity (0 unless
  -- reserved ahead).
  commit = function(key, D, _, _, rate, period, burst, g)
    D = gcra_commit(key, D, rate, period, g)
    return D, 0, 0, gcra_until(D, rate, burst * period)
  end,

  reset = function(D, _, _, rate) return gcra_until(D, rate, 0) end,

  owed = function(D, _, _, _, period, burst) return gcra_owed(D, period, burst) end,

  -- A leased unit left the bucket for good: no limit of its own (the
  -- lease TTL bounds it).
  valid = function() return -1 end,

  -- Aged: leased units come back late (at expiry), see gcra_refund_aged.
  refund = function(key, rate, period, _, g, at) gcra_refund_aged(key, rate, period, g, at) end,
}
