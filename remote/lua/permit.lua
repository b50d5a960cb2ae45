-- permit.lua: the permits of a concurrency limit's key (Limiter.AcquirePermit),
-- and in lease mode the members' slots among them (docs/scripts.md).
--
-- KEYS[1]   the key's permits: a sorted set of permit ids by expiry (us)
-- KEYS[2]   (lease) the key's members: member -> "demand slots expiry
--           waiting-since"
-- ARGV[1]   'acquire', 'release', 'extend' or 'lease'
-- ARGV[2]   the permit's id (random, the caller's); lease: the member's
-- ARGV[3]   limit (acquire, lease)
-- ARGV[4]   ttl, us (acquire, extend, lease)
-- ARGV[5..8] (lease) the slots the member holds (h), of them in use (u),
--           the slots it wants (w >= u), its demand (d: in use and asked for)
-- ARGV[9]   (lease) how many it may hold after a call whose reply it did
--           not get: those past h are removed
--
-- Returns { done (1 or 0), now (us), held (after the call), retry_after
-- (us until the first permit held expires, when an acquire is denied), 0 }:
-- acquire, 1 when granted; release and extend, 1 when the permit was held.
-- A lease returns { slots held after the call, now, held by all,
-- retry_after (when it holds no more than u), lost (1: its slots had
-- expired), contended (1 or 0), its fair share }.
local now = NOW
local key, op, id = KEYS[1], ARGV[1], ARGV[2]
-- Expired permits (their holder gone) are dropped first.
call('ZREMRANGEBYSCORE', key, '-inf', now)

-- The key lives as long as its last permit. Returns how long that is (us),
-- or 0 when none is held.
local function keep()
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if not last[2] then return 0 end
  local life = tonumber(last[2]) - now
  expire_in(key, life)
  return life
end

-- The first permit or slot held expires in (us).
local function first_expiry()
  local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then return max(1, tonumber(first[2]) - now) end
  return 1
end

-- The member's slots from..to-1 leave the set (ZREM); how many were there.
local function drop(m, from, to)
  local gone, args = 0, {}
  for j = from, to - 1 do
    args[#args + 1] = m .. '#' .. j
    if #args == 1000 or j == to - 1 then
      gone = gone + call('ZREM', key, unpack(args))
      args = {}
    end
  end
  return gone
end

if op == 'lease' then
  local m, limit, ttl = id, tonumber(ARGV[3]), tonumber(ARGV[4])
  local h, u, w, d = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  -- Its slots leave the set, to come back renewed: fewer than it holds
  -- means they expired (all at once: they share an expiry). Slots from h
  -- to ARGV[9] may be there too, from a call whose reply was lost: they
  -- go.
  local lost = 0
  if h > 0 and drop(m, 0, h) < h then lost, h, u = 1, 0, 0 end
  local maybe = tonumber(ARGV[9] or 0) or 0
  if maybe > h then drop(m, h, maybe) end
  -- The members: "demand slots expiry waiting-since" (since: when it
  -- began to want more than it holds, 0 when it does not).
  local mkey = KEYS[2]
  local all = call('HGETALL', mkey)
  local od, on, os, leased, since = {}, {}, {}, 0, now
  for i = 1, #all, 2 do
    local a, b, e, w0 = match(all[i + 1], '^(%d+) (%d+) (%d+) ?(%d*)$')
    if not e or tonumber(e) <= now then
      call('HDEL', mkey, all[i])
    elseif all[i] == m then
      if (tonumber(w0) or 0) > 0 then since = tonumber(w0) end
    else
      od[#od + 1], on[#on + 1], os[#os + 1] = tonumber(a), tonumber(b), tonumber(w0) or 0
      leased = leased + tonumber(b)
    end
  end
  local held = call('ZCARD', key) -- without this member's slots
  -- What the permits outside every lease leave to the members, shared by
  -- max-min over their demands (fairshare.lua's water level, each demand
  -- a class of its own), rounded up: with more members than room, each
  -- may have a slot in turn.
  local room = max(0, limit - (held - leased))
  local total, level = d, nil
  for i = 1, #od do total = total + od[i] end
  local contended = 0
  if total > room then
    contended = 1
    local cs = { { d, 1, d } }
    for i = 1, #od do cs[#cs + 1] = { od[i], 1, od[i] } end
    level = ceil(water_level(cs, room))
  end
  local share = w
  if level then share = min(d, level) end
  -- Free slots go first to the members that have waited longer, up to
  -- their share: in turn, not to whoever asks again first.
  local reserved = 0
  for i = 1, #od do
    if os[i] > 0 and os[i] < since then
      local want = od[i]
      if level then want = min(want, level) end
      reserved = reserved + max(0, want - on[i])
    end
  end
  -- (Its slots in use it keeps, even past the limit, lowered meanwhile.)
  local n = max(u, min(w, max(share, u), limit - held - reserved))
  local exp = now + ttl
  local args = {}
  for j = 0, n - 1 do
    args[#args + 1] = exp
    args[#args + 1] = m .. '#' .. j
    if #args == 2000 or j == n - 1 then
      call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if n > 0 or d > 0 then
    if n >= d then since = 0 end
    -- A member that holds nothing counts its demand a second at most.
    if n == 0 then exp = now + min(ttl, 1000000) end
    call('HSET', mkey, m, format('%d %d %d %d', d, n, exp, since))
  else
    call('HDEL', mkey, m)
  end
  -- The members live as long as the last permit, or this member's entry.
  expire_in(mkey, max(exp - now, keep()))
  local retry = 0
  if n <= u then retry = first_expiry() end
  return { n, now, held + n, retry, lost, contended, share }
end

if op == 'release' then
  local done = call('ZREM', key, id)
  return { done, now, call('ZCARD', key), 0 }
end
local ttl = tonumber(ARGV[4])
if op == 'extend' then
  -- (ZREM then ZADD: the commands the README's ACL allows.)
  if call('ZREM', key, id) == 0 then return { 0, now, call('ZCARD', key), 0 } end
  call('ZADD', key, now + ttl, id)
  keep()
  return { 1, now, call('ZCARD', key), 0 }
end
local held = call('ZCARD', key)
if held >= tonumber(ARGV[3]) then
  return { 0, now, held, first_expiry() }
end
call('ZADD', key, now + ttl, id)
keep()
return { 1, now, held + 1, 0 }
