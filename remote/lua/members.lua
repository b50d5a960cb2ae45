-- members.lua: the instances that lease a key, for acquire.lua's fair share.
--
-- A key leased by several instances keeps a hash of them next to its state,
-- member id -> "expires demand tokens at since":
--   expires  us; the member counts until then
--   demand   units per second it said it wants
--   tokens   its bucket under the fair share (fairshare.lua), in units, or
--            'x' for a bucket not kept (the demand fitted), which counts
--            as full
--   at       us, when the entry was last written
--   since    us, when it joined (missing from an entry an older release
--            wrote: it counts as joined at `at`)
-- The hash expires with its last member. Instances that never lease the key
-- cost it nothing; exact mode never names a member.

-- How long a member counts after its last lease: three of its horizons,
-- since it leases about once a horizon, so that one late lease (a slow
-- reply, a pause) does not drop it and hand its share to the others for a
-- moment; and at least a second, the heartbeat of a Leaser.
local function member_ttl(horizon) return max(3 * horizon, 1000000) end

-- The live members of the key whose members hash is mkey, seen by member
-- (whose demand is demand) at NOW; entries past their expiry are deleted.
-- wstart is the start (us) of the window whose start settles the members
-- (see acquire.lua), or 0. Returns
--   ds       every live member's demand, this member's first
--   total    their sum
--   last     the latest expiry of a member, this one's (NOW + ttl) included
--   tokens   this member's bucket (nil: not kept) and at, when written
--   since    when this member joined (NOW if it is new)
--   settled  every member, this one included, joined before wstart
--   newest   when the member that joined last joined (this one included)
--   others   the other members' demand, tokens (false: not kept) and time
--            written, three values each, in turn
local function read_members(mkey, member, demand, ttl, wstart)
  local raw = call('HGETALL', mkey)
  local ds, total, last = { demand }, demand, NOW + ttl
  local tokens, at
  local since, settled, newest = NOW, true, 0
  local others = {}
  for j = 1, #raw, 2 do
    local e, d, tk, t, s0 = match(raw[j + 1], '^(%d+) (%d+) (%S+) (%d+) ?(%d*)$')
    e = tonumber(e)
    if not e or e <= NOW then
      call('HDEL', mkey, raw[j])
    else
      local joined = tonumber(s0) or tonumber(t)
      if joined >= wstart then settled = false end
      if joined > newest then newest = joined end
      if raw[j] == member then
        since = joined
        if tk ~= 'x' then tokens, at = tonumber(tk), tonumber(t) end
      else
        d = tonumber(d)
        ds[#ds + 1], total = d, total + d
        local k = #others
        -- (false, not nil, for a bucket not kept: nil would end the list)
        others[k + 1], others[k + 2], others[k + 3] = d, tonumber(tk) or false, tonumber(t)
        if e > last then last = e end
      end
    end
  end
  if since >= wstart then settled = false end
  if since > newest then newest = since end
  return ds, total, last, tokens, at, since, settled, others, newest
end

-- Writes member's entry: its demand, its bucket (tokens, a number or nil for
-- none) and since; the hash lives until last, the latest expiry of a member.
-- A bucket is kept to a thousandth of a unit (see fairshare.lua, "Floats").
local function write_member(mkey, member, demand, tokens, since, ttl, last)
  local tk = 'x'
  if tokens then tk = format('%.3f', tokens) end
  call('HSET', mkey, member, format('%d %d %s %d %d', NOW + ttl, demand, tk, NOW, since))
  call('PEXPIRE', mkey, int(cdiv(last - NOW, 1000)))
end
