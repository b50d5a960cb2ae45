-- prelude.lua: shared by every script. For each set of algorithms the Go
-- side concatenates
--   prelude.lua, gcra.lua (if a bucket is used), the file of each algorithm
--   in the set: the definitions; then, for each entry point, now.lua and
--   its main file (acquire.lua after members.lua and fairshare.lua,
--   exact.lua, refund.lua, ...)
-- so a policy that mixes algorithms is still decided by one atomic call.
-- The same text runs two ways (store.go):
--   - as a Redis function (Redis 7+): one library per set, loaded once
--     (FUNCTION LOAD), whose definitions run once at load, and each main
--     file the body of a function (FCALL), which sets KEYS and ARGV, the
--     library's locals, from its arguments;
--   - as a script (EVALSHA), definitions and one main file, where Redis
--     runs the whole chunk on every call: every function and table in the
--     definitions is made anew each time, garbage included (remote's
--     TestScriptCost measures what that costs).
-- So only what the set uses is included, state moves between functions as
-- plain numbers (multiple returns), and the limits are read from ARGV on
-- demand rather than copied into tables. Nothing defined here is changed
-- by a call but NOW, KEYS and ARGV (and, on a library's first call, the
-- locals globals() sets): a function's calls share them.
--
-- Arithmetic: Lua numbers are doubles. Every value here is a whole number
-- below 2^53 (the Go side rejects limits whose products could exceed it), so
-- sums, products and the floor or ceiling of a quotient are exact.
--
-- Time: NOW is Redis TIME in microseconds, read once; no other clock is read.
-- Redis may expire a key while a script runs (a TTL can be a millisecond):
-- no script reads a key after writing it, and an algorithm's TTL only ever
-- drops state that no longer matters.

-- The library functions the scripts use, as locals: reading a global
-- costs Redis about as much as the call it makes (math.floor: two table
-- lookups). A function library cannot read them when it loads (Redis lets
-- it see only redis.register_function then), so now.lua sets them at the
-- start of a call, once per library (a script's, every call).
local function globals()
  return math.floor, math.ceil, math.max, math.min, string.format, string.match,
    tonumber, redis.call, table.sort, unpack, select, string.gmatch, math.log, table.concat
end
local floor, ceil, max, min, format, match, tonumber, call, sort, unpack, select, gmatch, log, concat
local HUGE = 1 / 0

-- floor(a / b) and ceil(a / b) for whole a and b > 0, exact below 2^53.
local function idiv(a, b) return floor(a / b) end
local function cdiv(a, b) return -floor(-a / b) end

-- Numbers go to redis.call formatted by hand: the default conversion keeps
-- only 14 significant digits and would round a microsecond timestamp.
local function int(x) return format('%d', x) end

-- Expire key after us microseconds, rounded up to whole milliseconds.
local function expire_in(key, us)
  call('PEXPIRE', key, int(max(1, cdiv(us, 1000))))
end

-- Redis TIME in us, set at the start of each call (now.lua).
local NOW

-- The reply of a decision (acquire.lua, exact.lua, peek.lua, charge.lua) is
-- up to eleven integers, written as one string (reply below), in this
-- order; values left off the end are 0, so that the common replies are
-- short:
--   granted      units charged to every limit; 0 means denied, nothing charged
--   now          the Redis time of the decision, us (a refund names it)
--   remaining    units the decider could still grant now
--   reset_after  us until the decider is fully replenished
--   valid_for    us the grant may be used for before it lapses (the end of a
--                window or bucket, always > 0), or 0 for no limit of the
--                policy's own, and when denied
--   retry_after  us until min units could be granted (when the limits deny
--                them, theirs, as exact mode's; else this member's);
--                when granted, 0, or under the fair share the us until
--                this member's own bucket holds its next batch (asking
--                sooner is denied)
--   decider      0-based index of the limit that decided: when denied, the
--                denying limit that frees up last; when granted, the one with
--                the fewest units left
--   wait         us until the granted units may be used (a leaky bucket's
--                queue); when denied under the fair share, the us until
--                this member asks again, when later than retry_after; else 0
--   members      the live members of the key, this one included; 0 when the
--                call names no member
--   blocked      1 when denied because the key is blocked (then decider 0,
--                remaining 0, retry_after and reset_after the block's time
--                left, members 0); 2 when denied by this member's fair
--                share while the limits had room for min units
--                (acquire.lua: retry_after is this member's wait); else 0
--   debt         (charge.lua only) units the decider owes beyond its room

-- reply(...) is the reply of a decision: its 4 to 11 integers as one
-- string, in decimal, separated by spaces. Redis converts a table reply
-- value by value, which costs more than formatting them here, and the
-- client reads one string with fewer allocations than an array.
local REPLY = { '%d %d %d %d', '%d %d %d %d %d', '%d %d %d %d %d %d',
  '%d %d %d %d %d %d %d', '%d %d %d %d %d %d %d %d', '%d %d %d %d %d %d %d %d %d',
  '%d %d %d %d %d %d %d %d %d %d', '%d %d %d %d %d %d %d %d %d %d %d' }
local function reply(...)
  return format(REPLY[select('#', ...) - 3], ...)
end

-- The time left (us) of a block of a key (Store.Block: a key with a PX
-- TTL), or 0 when the key is not blocked; block_left, the same from the
-- block key's PTTL. A block key without a TTL (not one ratelease wrote)
-- blocks until it is deleted: 1s at a time.
local function block_left(ms)
  if ms == -2 then return 0 end
  if ms < 0 then return 1000000 end
  return max(1, ms) * 1000
end
local function blocked_for(bkey) return block_left(call('PTTL', bkey)) end

-- The number of ARGV values before the limits': each entry point sets it
-- (8 in acquire.lua, refund.lua and the operator scripts, 3 in exact.lua,
-- 2 in bucket.lua), since a library's locals outlive a call.
local HEADER

-- The parameters of limit i (1-based), four ARGV values from
-- ARGV[HEADER + 4i - 3]: algorithm id, rate (units per period), period
-- (us), burst (capacity).
local function limit(i)
  local o = HEADER + 4 * i - 3
  return tonumber(ARGV[o]), tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
end

-- Algorithm id (remote.Algorithm) -> its functions. Each algorithm's state is
-- up to three numbers (a, b, c), passed and returned as plain values:
--   load(key, rate, period, burst)                  -> a, b, c
--   avail(a, b, c, rate, period, burst, reserve)    -> units grantable now
--   retry(key, a, b, c, rate, period, burst, n, reserve)
--                              -> us until n fit (called only when they do not)
--   commit(key, a, b, c, rate, period, burst, g)    -> a, b, c, wait
--                              charges g units and writes the key (with a TTL);
--                              wait is how long the grant waits for its slot
--   reset(a, b, c, rate, period, burst)             -> us until fully replenished
--   valid(a, b, c, rate, period, burst)             -> us a grant made now may
--                              be used for before it must be given back, or -1
--                              for no limit of the algorithm's own
--   refund(key, rate, period, burst, g, at)         gives g units of the grant
--                              made at time `at` back, never above capacity
--   owed(a, b, c, rate, period, burst)              -> units charged beyond the
--                              limit's room (charge.lua), 0 when none
--   span(a, b, c, rate, period, burst)  (optional)  -> period, burst as the
--                              fair share sees them, where the limit's slots
--                              hold something else (a calendar window's ends)
local ALG = {}

-- Give back g units of a grant made at time `at` (us) to limits 1..n, each
-- by its algorithm's refund.
-- The limit that denies need units and frees up last, of the n limits whose
-- states (S1..S3) and room (AV) a script read: its index, the us until need
-- units fit (retry_after) and until it is full again (reset_after).
local function denier(n, S1, S2, S3, AV, need, reserve)
  local decider, retry, reset = 1, -1, 0
  for i = 1, n do
    if AV[i] < need then
      local alg, rate, period, burst = limit(i)
      local A = ALG[alg]
      local r = A.retry(KEYS[i], S1[i], S2[i], S3[i], rate, period, burst, need, reserve)
      if r > retry then
        decider, retry = i, r
        reset = A.reset(S1[i], S2[i], S3[i], rate, period, burst)
      end
    end
  end
  return decider, retry, reset
end

-- Charge g units to limits 1..n, whose states (S1..S3) a script read.
-- Returns the longest wait of a grant for its slot, and the limit with the
-- fewest units left (the latest to be full again among equals): its
-- index, what it has left and the us until it is full.
local function charge_all(n, S1, S2, S3, g, reserve)
  local wait, decider, left, reset = 0, 1, -1, 0
  for i = 1, n do
    local alg, rate, period, burst = limit(i)
    local A = ALG[alg]
    local a, b, c, w = A.commit(KEYS[i], S1[i], S2[i], S3[i], rate, period, burst, g)
    if w > wait then wait = w end
    local l = A.avail(a, b, c, rate, period, burst, reserve)
    local r = A.reset(a, b, c, rate, period, burst)
    if left < 0 or l < left or (l == left and r > reset) then
      decider, left, reset = i, l, r
    end
  end
  return wait, decider, left, reset
end

local function refund_all(n, g, at)
  for i = 1, n do
    local alg, rate, period, burst = limit(i)
    ALG[alg].refund(KEYS[i], rate, period, burst, g, at)
  end
end
