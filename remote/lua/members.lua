-- members.lua: the instances that lease a key, for acquire.lua's fair
-- share. A call reads its own entry and the key's aggregates, never the
-- others' entries, so it costs the same with 10 members or 10,000
-- (docs/scripts.md tells the generations and the sweep).
--
-- The key's members hash: member id -> "gen demand tk at since f size u uw
-- class":
--   gen      us, the start of the generation it last leased in
--   demand   units per second it said it wants
--   tk       its bucket (fairshare.lua), in units, or 'x' for none (its
--            demand fitted), which counts as full
--   at       us, when the entry was last written
--   since    us, when it joined
--   f, size  its fair rate (units/s) and its bucket's size when written
--   u, uw    what it took of its part of the window that started at uw
--            (us), or 0 0
--   class    the class its demand was counted in (class_of)
-- and the field '#' (no member id starts with '#'), the aggregates:
--   "newest U uw", then for each live generation ";start P T F FT Z L1 L2
--   B" and " idx count sum" for each demand class, where
--   newest   us, when the member that joined last joined
--   U, uw    what the members together took of their parts of the window
--            that started at uw
--   start, P the generation's start and length (us)
--   T, F, FT, Z  the sums over its members of their buckets (never below
--            0), fair rates, f * (at - start) / 1e6, and sizes: the buckets
--            together are min(Z, T + F * (now - start) / 1e6 - FT)
--   L1, L2   us, its last lease, and the last by a member other than the
--            one that made L1 (0: none); members that leave it do not move
--            them, so they are never older than its members' leases
--   B        us, the longest batch time (size / f) a lease into it had
--   idx count sum  a demand class: how many members, their demands' sum

-- How long a member counts after its last lease: three horizons (one late
-- lease does not drop it), at least a second (a Leaser's heartbeat).
local function member_ttl(horizon) return max(3 * horizon, 1000000) end
-- A member counts until GENS - 1 to GENS generations after its lease; a
-- generation goes, with its members, GENS lengths after its start.
local GENS = 4
-- 8 / ln 2: demand d is in class floor(log(d) * CLASS), within a factor
-- 2^(1/8) of its class's others. Only demands from R / 2^SPAN to R are
-- told apart, so a generation has at most 8 * SPAN + 1 classes.
local CLASS, SPAN = 11.541560327111707, 12
-- The sweep looks at SWEEP fields a call.
local SWEEP = 16

-- The class of demand d on a key of rate R (units/s). (The small addend
-- keeps a power of 2^(1/8) in its own class, not below.)
local function class_of(d, R)
  return floor(log(min(R, max(R / 4096, d))) * CLASS + 0.000000001)
end

-- A generation's sums with a member's contribution added (s = 1) or taken
-- out (s = -1): demand d in class i, bucket tk (>= 0), fair rate f,
-- written at, size. (A generation's classes are two tables by class,
-- g.c its members and g.s their demands' sum: no table per class.)
local function contribute(g, s, d, i, tk, f, at, size, M)
  local t = g.t
  if t then t[i] = nil end -- its text is no longer the class's
  local c0, s0 = g.c[i] or 0, g.s[i] or 0
  local c, sum = c0 + s, s0 + s * d
  if c <= 0 then
    g.c[i], g.s[i] = nil, nil
    c, sum = 0, 0
  else
    g.c[i], g.s[i] = c, sum
  end
  -- The classes of every generation together, when kept (M.mc, M.ms: see
  -- classes), change as this one's did.
  local mc = M and M.mc
  if mc then
    local ms, n = M.ms, (mc[i] or 0) + c - c0
    if n <= 0 then
      mc[i], ms[i] = nil, nil
    else
      mc[i], ms[i] = n, (ms[i] or 0) + sum - s0
    end
  end
  g.n, g.D = g.n + s, g.D + s * d
  g.T, g.F, g.FT, g.Z = g.T + s * tk, g.F + s * f, g.FT + s * f * (at - g.start) / 1000000, g.Z + s * size
end

-- The entry of a member, parsed, as gen, d, tk, at, since, f, size, u, uw,
-- c (see above; tk nil for none): nil for none. (Plain values, not a
-- table: a call reads one entry.)
local ENTRY = '^(%d+) (%d+) (%S+) (%d+) (%d+) (%S+) (%S+) (%S+) (%d+) (%-?%d+)$'
local function parse_entry(v)
  if not v then return nil end
  local gen, d, tk, at, since, f, size, u, uw, c = match(v, ENTRY)
  if not gen then return nil end -- not an entry of this format: a new member
  return tonumber(gen), tonumber(d), tonumber(tk), tonumber(at), tonumber(since),
    tonumber(f), tonumber(size), tonumber(u), tonumber(uw), tonumber(c)
end

-- What an entry adds to its generation's bucket sums: its bucket, never
-- below 0 (a bucket in debt claims nothing), full when not kept.
local function entry_tk(tk, size, uw)
  if uw > 0 then return 0 end -- a window's part: see U
  if tk then return max(0, tk) end
  return size
end

-- The aggregates the last call of this library wrote (a library's locals
-- outlive a call; a script's do not), parsed: the key AGG_KEY, its '#' as
-- written (AGG), and what read_members would read from it (the head's
-- numbers, the generations written). Every number of the text reads back
-- as it was (%.17g, and whole numbers as %d), so when a call finds the
-- very text, it takes these rather than parse it. Each call takes them
-- (they are then its own) and only write_member puts them back, after
-- its HSET.
local AGG_KEY, AGG, AGG_NEWEST, AGG_U, AGG_UW, AGG_GENS, AGG_MC, AGG_MS

-- Takes generation g's classes out of the classes of every generation
-- kept together (mc: counts, ms: sums, by class).
local function drop_classes(mc, ms, g)
  local gs = g.s
  for i, c in pairs(g.c) do
    local n = (mc[i] or 0) - c
    if n <= 0 then
      mc[i], ms[i] = nil, nil
    else
      mc[i], ms[i] = n, ms[i] - gs[i]
    end
  end
end

-- The key's membership, read by member (whose demand is demand and whose
-- lease lasts ttl) at NOW: the live generations, this member's entry, and
-- the aggregates, with this member's last contribution taken out and its
-- demand put in the newest generation. Returns M, with
--   M.n, M.D   the live members (this one included) and their demands' sum
--   M.tokens, M.at   this member's bucket (nil: not kept) and when written
--   M.last     when this member's entry was written (nil: none)
--   M.since    when this member joined (NOW if it is new)
--   M.newest   when the member that joined last joined (this one included)
--   M.gens     the live generations, oldest first; M.cur the newest
--   M.U, M.uw  what the others took of their window parts (see above)
local function read_members(mkey, member, demand, ttl)
  local raw = call('HMGET', mkey, '#', member)
  local gens = {}
  local M = { key = mkey, member = member, demand = demand, gens = gens, newest = 0, U = 0, uw = 0,
    since = NOW, n = 1, D = demand }
  local agg = raw[1]
  -- The aggregates this library wrote last, if they are these: what
  -- parsing them would give, without the parsing (see AGG). Taken either
  -- way: their tables are this call's now.
  local wrote = agg and agg == AGG and mkey == AGG_KEY and AGG_GENS
  local mc, ms = AGG_MC, AGG_MS
  AGG, AGG_GENS, AGG_MC, AGG_MS = nil, nil, nil, nil
  if wrote then
    M.newest, M.U, M.uw = AGG_NEWEST, AGG_U, AGG_UW
    M.mc, M.ms = mc, ms
    for k = 1, #wrote do
      local g = wrote[k]
      if NOW >= g.start + GENS * g.P then
        -- (A generation gone: its classes leave those kept together.)
        if mc then drop_classes(mc, ms, g) end
      else
        -- (Classes and sums made anew in the order the text holds them,
        -- as parsing makes them: the same tables, the same order.)
        local cc, cd, n, D, gs = {}, {}, 0, 0, g.s
        for i, c in pairs(g.c) do
          local s = gs[i]
          cc[i], cd[i] = c, s
          n, D = n + c, D + s
        end
        g.n, g.D, g.c, g.s = n, D, cc, cd
        gens[#gens + 1] = g
      end
    end
  elseif agg then
    -- (One pass over the aggregates: the head, then each generation
    -- through its classes, up to the next ';'.)
    local newest, U, uw = match(agg, '^(%d+) ([^%s;]+) (%d+)')
    if newest then
      M.newest, M.U, M.uw = tonumber(newest), tonumber(U), tonumber(uw)
      for start, P, T, F, FT, Z, L1, L2, B, cls in gmatch(agg, ';(%d+) (%d+) ([^%s;]+) ([^%s;]+) ([^%s;]+) ([^%s;]+) (%d+) (%d+) (%d+)([^;]*)') do
        start, P = tonumber(start), tonumber(P)
        if NOW < start + GENS * P then
          local cc, cd, n, D = {}, {}, 0, 0
          for i, c, s in gmatch(cls, '(%-?%d+) (%d+) (%d+)') do
            i, c, s = tonumber(i), tonumber(c), tonumber(s)
            cc[i], cd[i] = c, s
            n, D = n + c, D + s
          end
          gens[#gens + 1] = { start = start, P = P, T = tonumber(T), F = tonumber(F), FT = tonumber(FT), Z = tonumber(Z),
            L1 = tonumber(L1), L2 = tonumber(L2), B = tonumber(B), n = n, D = D, c = cc, s = cd }
        end
      end
    end
  end
  -- This member's last contribution comes out, if its generation lives.
  local gen, d, tk, at, since, f, size, u, uw, c = parse_entry(raw[2])
  if gen then
    for k = 1, #gens do
      local g = gens[k]
      if g.start == gen then
        contribute(g, -1, d, c, entry_tk(tk, size, uw), f, at, size, M)
        M.since = since
        if tk then M.tokens, M.at = tk, at end
        M.last = at
        if uw == M.uw then M.U = M.U - u end
        break
      end
    end
  end
  -- The newest generation, begun anew once the last one's length passed;
  -- long enough that this member, leasing no later than ttl from now, is
  -- still in a live generation.
  local cur = gens[#gens]
  local P = cdiv(ttl, GENS - 1)
  if not cur or NOW >= cur.start + cur.P then
    cur = { start = NOW, P = P, T = 0, F = 0, FT = 0, Z = 0, L1 = 0, L2 = 0, B = 0, n = 0, D = 0, c = {}, s = {} }
    gens[#gens + 1] = cur
  elseif cur.P < P then
    cur.P = P
  end
  M.cur = cur
  if M.since > M.newest then M.newest = M.since end
  local n, D = 1, demand
  for k = 1, #gens do n, D = n + gens[k].n, D + gens[k].D end
  M.n, M.D = n, D
  return M
end

-- The classes of the generations gens together: their counts and sums by
-- class.
local function class_sums(gens)
  local bc, bs = {}, {}
  for k = 1, #gens do
    local g = gens[k]
    local gs = g.s
    for i, c in pairs(g.c) do
      bc[i], bs[i] = (bc[i] or 0) + c, (bs[i] or 0) + gs[i]
    end
  end
  return bc, bs
end

-- The demand classes of every live member, this one's included (in its
-- class, M.class), as a list of { mean, count, sum }, as classes_in_order
-- makes it.
local function classes_in_order(M)
  local bc, bs = class_sums(M.gens)
  local i = M.class
  bc[i], bs[i] = (bc[i] or 0) + 1, (bs[i] or 0) + M.demand
  local cs = {}
  for i, c in pairs(bc) do
    local s = bs[i]
    cs[#cs + 1] = { s / c, c, s }
  end
  return cs
end

-- classes_in_order(M), sorted by mean and marked so (cs.sorted), as
-- water_level would sort it, when no two classes have one mean: then the
-- list has one sorted order, found by sorting the means alone, in C,
-- rather than by a Lua comparison per pair; and the classes of every
-- generation together (M.mc, M.ms, their counts and sums, whole numbers:
-- any order of adding them gives the same) are kept across the call and,
-- in AGG, to the next (contribute changes them as it changes a class).
-- With ties, classes_in_order's list as it comes, for water_level's own
-- sort: exactly what it always was.
--
-- by_mean is keyed by -m: a mean is often whole, and miniredis's Lua
-- (gopher-lua) fills a table's array part with nils up to a positive
-- whole key (a demand of a million: a million slots, every call), where
-- Redis's puts it in the hash part; a negative key goes to the hash in
-- both.
local function classes(M)
  local mc, ms = M.mc, M.ms
  if not mc then
    mc, ms = class_sums(M.gens)
    M.mc, M.ms = mc, ms
  end
  local own, d = M.class, M.demand
  local means, by_mean = {}, {}
  for i, c in pairs(mc) do
    local s = ms[i]
    if i == own then c, s = c + 1, s + d end
    local m = s / c
    if by_mean[-m] then return classes_in_order(M) end
    by_mean[-m] = { m, c, s }
    means[#means + 1] = m
  end
  if not mc[own] then
    local m = d / 1
    if by_mean[-m] then return classes_in_order(M) end
    by_mean[-m] = { m, 1, d }
    means[#means + 1] = m
  end
  sort(means)
  local cs = { sorted = true }
  for j = 1, #means do cs[j] = by_mean[-means[j]] end
  return cs
end

-- Deletes up to SWEEP entries of dead members, drawn at random, while they
-- outnumber the live ones. (Not HSCAN: a listpack is scanned whole
-- whatever its COUNT.)
local function sweep(M)
  if call('HLEN', M.key) <= 2 * M.n + SWEEP then return end
  local live = {}
  for k = 1, #M.gens do live[M.gens[k].start] = true end
  local kv = call('HRANDFIELD', M.key, SWEEP, 'WITHVALUES')
  for j = 1, #kv, 2 do
    local f = kv[j]
    if f ~= '#' and f ~= M.member then
      -- (An entry of another format, another release's, is left for its
      -- writer: it goes with the hash.)
      local gen = match(kv[j + 1], '^(%d+) %d+ %S+ %d+ %d+ %S+ %S+ %S+ %d+ %-?%d+$')
      if gen and not live[tonumber(gen)] then call('HDEL', M.key, f) end
    end
  end
end

-- The aggregates as stored (see above), and the generations they hold
-- (nil where a number written '%d' is not a whole one >= 0, which
-- parsing would not read back as it is: never, as written here).
local function format_members(M)
  local newest, uw = M.newest, M.uw
  local out = { format('%d %.17g %d', newest, M.U, uw) }
  local kept, whole = {}, newest % 1 == 0 and newest >= 0 and uw % 1 == 0 and uw >= 0
  for k = 1, #M.gens do
    local g = M.gens[k]
    if g.n > 0 then
      kept[#kept + 1] = g
      local start, P = g.start, g.P
      if start % 1 ~= 0 or start < 0 or P % 1 ~= 0 or P < 0 then whole = false end
      out[#out + 1] = format(';%d %d %.17g %.17g %.17g %.17g %d %d %d', start, P, g.T, g.F, g.FT, g.Z, g.L1, g.L2, g.B)
      -- (A class's text is kept in g.t until the class changes: a call
      -- changes one or two classes, and formats only those.)
      local gs, t = g.s, g.t
      if not t then
        t = {}
        g.t = t
      end
      for i, c in pairs(g.c) do
        local x = t[i]
        if not x then
          local s = gs[i]
          if i % 1 ~= 0 or c % 1 ~= 0 or s % 1 ~= 0 or s < 0 then whole = false end
          x = format(' %d %d %d', i, c, s)
          t[i] = x
        end
        out[#out + 1] = x
      end
    end
  end
  if not whole then kept = nil end
  return concat(out), kept
end

-- Writes member's entry and puts its contribution in the newest
-- generation: its bucket (tokens, nil for none, kept to a thousandth of a
-- unit), its fair rate f and its bucket's size (both 0 for a window's
-- part), and u, what it took of its part of the window that started at uw
-- (0 0 for none). The hash lives until its last generation lapses.
local function write_member(M, tokens, f, size, u, uw)
  local cur = M.cur
  local tk, tkc = 'x', size
  if tokens then
    tk = format('%.3f', tokens)
    tkc = max(0, tonumber(tk)) -- as stored: taken out as it was put in
  end
  if uw > 0 then tkc = 0 end -- a window's part: see U
  contribute(cur, 1, M.demand, M.class, tkc, f, NOW, size, M)
  -- (This member made L1 if its last lease is L1: by its time, to the us.)
  if M.last ~= cur.L1 then cur.L2 = cur.L1 end
  cur.L1 = NOW
  if f > 0 then cur.B = max(cur.B, ceil(size / f * 1000000)) end
  if uw > 0 then
    if M.uw ~= uw then M.U, M.uw = 0, uw end
    M.U = M.U + u
  end
  sweep(M)
  local agg, kept = format_members(M)
  call('HSET', M.key, M.member, format('%d %d %s %d %d %.17g %.17g %.17g %d %d', cur.start, M.demand, tk, NOW, M.since, f, size, u, uw, M.class),
    '#', agg)
  if kept then
    local mc, ms = M.mc, M.ms
    if mc and #kept < #M.gens then
      -- (A generation not written, with no members, leaves what classes
      -- it still has out of those kept together, as parsing would.)
      for k = 1, #M.gens do
        local g = M.gens[k]
        if g.n <= 0 then drop_classes(mc, ms, g) end
      end
    end
    AGG_KEY, AGG, AGG_NEWEST, AGG_U, AGG_UW, AGG_GENS, AGG_MC, AGG_MS = M.key, agg, M.newest, M.U, M.uw, kept, mc, ms
  end
  -- (The newest generation need not be the last to lapse: an older one
  -- may be longer, made so by a member of a longer horizon.)
  local last = 0
  for k = 1, #M.gens do
    local g = M.gens[k]
    if g.n > 0 then last = max(last, g.start + GENS * g.P) end
  end
  call('PEXPIRE', M.key, int(cdiv(last - NOW, 1000)))
end

-- Takes member out of the key's members hash mkey (it leaves: Close, an
-- evicted key): its entry and its contribution to the aggregates. The hash
-- goes once nobody else is left.
local function leave_members(mkey, member)
  local M = read_members(mkey, member, 1, 0)
  if M.n <= 1 then
    call('DEL', mkey)
    return
  end
  call('HDEL', mkey, member)
  call('HSET', mkey, '#', (format_members(M)))
end
