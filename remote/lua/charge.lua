-- charge.lua: charge units of a key whatever its limits have left
-- (Limiter.Charge): a cost known only once the work is done, or what it
-- came to beyond the estimate admitted before it. Every limit is charged
-- the same units; a limit charged past its room is in debt, and denies
-- until the debt is paid off as it frees up: a bucket as it refills (a
-- leaky bucket as its queue drains), a sliding window counter or log as
-- the charge slides out of the period, a fixed window when it ends (a new
-- window starts with no debt).
--
-- KEYS[i]   state key of limit i, as in acquire.lua (not the block: the
--           work was done, blocked or not)
-- ARGV[1]   units to charge
-- ARGV[2]   fit: 1 charges each limit only what it has room for (what an
--           outage admitted, charged on healing: each limit up to its own
--           room, none in debt); 0 charges every limit all the units
-- ARGV[3-8] unused (keep the limits at the same place as in acquire.lua)
-- ARGV[9..] the limits, as in acquire.lua
--
-- A log keeps a member per unit: it is charged at most its rate a call, a
-- whole period of debt (a longer one would only grow the log). A bucket's
-- debt stops growing where its state would stop being exact (gcra.lua):
-- at 2^53 / period units (9e9 for a second's period, 2.5e6 for an hour's).
--
-- Returns a decision's integers (see prelude.lua) and one more:
--   granted      the units charged (with fit, the most any limit took)
--   remaining, reset_after  of the decider, after the charge
--   retry_after  us until one unit fits again; 0 when one fits now
--   decider      the limit whose one unit fits last (the fewest units left
--                among equals)
--   debt         eleventh: the units the decider owes beyond its room
HEADER = 8
local g, fit = tonumber(ARGV[1]), ARGV[2] == '1'
local decider, retry, left, reset, debt = 1, -1, 0, 0, 0
local took = 0 -- with fit, the most units a limit took
for i = 1, #KEYS do
  local alg, rate, period, burst = limit(i)
  local A, key = ALG[alg], KEYS[i]
  local a, b, c = A.load(key, rate, period, burst)
  local gi = g
  if alg == 2 then gi = min(g, rate) end
  if fit then gi = min(gi, max(0, A.avail(a, b, c, rate, period, burst, 0))) end
  if gi > 0 then a, b, c = A.commit(key, a, b, c, rate, period, burst, gi) end
  took = max(took, gi)
  local av = A.avail(a, b, c, rate, period, burst, 0)
  local r = 0
  if av < 1 then r = max(1, A.retry(key, a, b, c, rate, period, burst, 1, 0)) end
  if r > retry or (r == retry and av < left) then
    decider, retry, left = i, r, av
    reset, debt = A.reset(a, b, c, rate, period, burst), A.owed(a, b, c, rate, period, burst)
  end
end
if fit then g = took end
return reply(g, NOW, left, reset, 0, retry, decider - 1, 0, 0, 0, debt)
