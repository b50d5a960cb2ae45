-- giveback.lua: give back units admitted earlier whose work did not happen
-- (Limiter.Refund), taken as admitted now: the caller names no grant time.
--
-- KEYS[i]   state key of limit i, as in acquire.lua
-- ARGV[1]   units to give back (the Go side caps them at the largest
--           capacity of the limits: more could give nothing more back)
-- ARGV[2-8] unused (keep the limits at the same place as in acquire.lua)
-- ARGV[9..] the limits, as in acquire.lua
--
-- Per algorithm, never above capacity:
--   TokenBucket   the units go back into the bucket, up to full
--   FixedWindow   off the current window's count, down to 0: a window that
--                 has ended is gone, and gets nothing back
--   SlidingWindowCounter  off the current bucket's count, down to 0 (the
--                 previous bucket's weight fades by itself)
--   SlidingWindowLog  the newest entries still in the period are removed
--   LeakyBucket   the last slots of the queue are freed, down to empty
-- Returns the Redis time.
HEADER = 8
local g = tonumber(ARGV[1])
for i = 1, #KEYS do
  local alg, rate, period, burst = limit(i)
  if alg == 2 then
    -- The log: which entries were the caller's is not known; the newest go.
    -- (load trims what slid out, at most TRIM members a call.)
    ALG[2].load(KEYS[i], rate, period)
    call('ZPOPMAX', KEYS[i], int(g))
  else
    -- Refunds of a grant made now: each algorithm's own rule and caps.
    ALG[alg].refund(KEYS[i], rate, period, burst, g, NOW)
  end
end
return NOW
