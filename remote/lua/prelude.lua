-- prelude.lua: the definitions every script shares. The Go side assembles
-- each set of algorithms' scripts from it (scripts.go, docs/scripts.md);
-- one text runs as a Redis function library and as a plain script, so
-- only what a set uses is included, and state moves between functions as
-- plain numbers.
--
-- Numbers: admission state (a bucket's TAT, window counts, debts) is whole
-- microseconds and whole units below 2^53 (the Go side rejects limits that
-- could pass it), so its sums, products, floors and ceilings are exact.
-- Only the fair share's rates and member buckets (fairshare.lua) are
-- fractions, and they never grant more than the integer state allows.
--
-- Time: NOW is Redis TIME in us, read once (now.lua); no other clock is
-- read. No script reads a key after writing it: Redis may expire it
-- meanwhile.

-- The library functions the scripts use, as locals (a global read costs
-- as much as the call); a library cannot read them as it loads, so
-- now.lua sets them at a call's start, once per library.
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
-- 14 significant digits and would round a microsecond timestamp.
local function int(x) return format('%d', x) end

-- Expire key after us microseconds, rounded up to whole milliseconds.
local function expire_in(key, us)
  call('PEXPIRE', key, int(max(1, cdiv(us, 1000))))
end

-- Redis TIME in us, set at the start of each call (now.lua).
local NOW

-- reply(...) is a decision's reply (acquire.lua, exact.lua, peek.lua,
-- charge.lua): 4 to 11 integers as one string, in decimal, separated by
-- spaces, those left off the end 0 (cheaper for Redis and the client than
-- an array). In order (docs/scripts.md tells each one's cases):
--   granted      units charged to every limit; 0: denied, nothing charged
--   now          the Redis time of the decision, us (a refund names it)
--   remaining    units the decider could still grant now
--   reset_after  us until the decider is full again
--   valid_for    us a grant may be used before it lapses; 0: no bound, or denied
--   retry_after  us until min units fit; under the fair share, when granted,
--                until this member's next batch
--   decider      0-based index of the limit that decided
--   wait         us until the grant may be used (a leaky bucket's queue);
--                denied under the fair share, until this member asks again
--   members      the key's live members, this one included; 0 with no member
--   blocked      1: the key is blocked; 2: denied by this member's fair share
--   debt         (charge.lua) units the decider owes beyond its room
local REPLY = { '%d %d %d %d', '%d %d %d %d %d', '%d %d %d %d %d %d',
  '%d %d %d %d %d %d %d', '%d %d %d %d %d %d %d %d', '%d %d %d %d %d %d %d %d %d',
  '%d %d %d %d %d %d %d %d %d %d', '%d %d %d %d %d %d %d %d %d %d %d' }
local function reply(...)
  return format(REPLY[select('#', ...) - 3], ...)
end

-- The time left (us) of a key's block (Store.Block: a key with a PX TTL),
-- or 0; block_left, from its PTTL. A block without a TTL (not one
-- ratelease wrote) blocks until deleted: 1s at a time.
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
--   whole  (optional)  true when a window's room comes whole as it opens
local ALG = {}

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

-- Give back g units of a grant made at time `at` (us) to limits 1..n, each
-- by its algorithm's refund.
local function refund_all(n, g, at)
  for i = 1, n do
    local alg, rate, period, burst = limit(i)
    ALG[alg].refund(KEYS[i], rate, period, burst, g, at)
  end
end
