package remote

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratelease/ratelease/internal/redistest"
)

// checkWrote is a function added, for TestMembersAsWritten, to the
// library of token buckets: it reads a key's members twice, first from
// what the library's last call wrote (AGG, which read_members then takes)
// and then by parsing the hash, and replies "ok" when the two are the
// same in every number and every order, else what differs; "none" when
// the library holds nothing for the key.
const checkWrote = `
local mkey, member, demand, ttl, R = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not (AGG and AGG_KEY == mkey) then return 'none' end
local a = read_members(mkey, member, demand, ttl)
if AGG then return 'not taken' end
local b = read_members(mkey, member, demand, ttl)
local function same(what, x, y)
  if x ~= y and not (x ~= x and y ~= y) then error(what .. ': ' .. tostring(x) .. ' ~= ' .. tostring(y)) end
end
for _, k in ipairs({ 'newest', 'U', 'uw', 'since', 'tokens', 'at', 'n', 'D' }) do same(k, a[k], b[k]) end
same('gens', #a.gens, #b.gens)
same('cur', a.cur == a.gens[#a.gens], b.cur == b.gens[#b.gens])
for j = 1, #a.gens do
  local x, y = a.gens[j], b.gens[j]
  for _, k in ipairs({ 'start', 'P', 'T', 'F', 'FT', 'Z', 'n', 'D' }) do same('gen ' .. j .. ' ' .. k, x[k], y[k]) end
  local xs, ys = {}, {}
  for i, c in pairs(x.c) do xs[#xs + 1] = i .. ':' .. c .. ':' .. x.s[i] end
  for i, c in pairs(y.c) do ys[#ys + 1] = i .. ':' .. c .. ':' .. y.s[i] end
  same('gen ' .. j .. ' classes', table.concat(xs, ' '), table.concat(ys, ' '))
end
a.class, b.class = class_of(demand, R), class_of(demand, R)
local ca, cb = classes(a), classes(b)
same('classes', #ca, #cb)
same('sorted', ca.sorted, cb.sorted)
for j = 1, #ca do for k = 1, 3 do same('class ' .. j, ca[j][k], cb[j][k]) end end
same('level', water_level(ca, R), water_level(cb, R))
-- The classes of every generation together, as each call keeps them.
local function merged(M)
  local mc, ms = {}, {}
  for _, g in ipairs(M.gens) do
    for i, c in pairs(g.c) do mc[i], ms[i] = (mc[i] or 0) + c, (ms[i] or 0) + g.s[i] end
  end
  return mc, ms
end
for _, M in ipairs({ a, b }) do
  local mc, ms = merged(M)
  for i, c in pairs(mc) do same('merged ' .. i, c, M.mc[i]); same('merged sum ' .. i, ms[i], M.ms[i]) end
  for i in pairs(M.mc) do same('merged has ' .. i, mc[i] ~= nil, true) end
end
same('text', format_members(a), format_members(b))
return 'ok'
`

// TestMembersAsWritten: a call that finds the aggregates its library
// wrote last takes them as written rather than parse them
// (members.lua's AGG), and they must be exactly what parsing gives:
// every number, the generations, the classes in the same order (ties in
// the water level's sort keep it), the text written back. Members lease
// at random, with demands that tie across classes (the key's rate changes
// under them: two policies of one name), leave, and lapse.
func TestMembersAsWritten(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := NewStore(c, "aw")
	var ps []*Policy
	for _, rate := range []int64{1000, 200} {
		p, err := NewPolicy("p", []Limit{{Algorithm: TokenBucket, Rate: rate, Burst: rate, Period: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	// The library of token buckets, with the check added, in place of
	// the one the policies use.
	base := scriptsFor(1 << TokenBucket)
	lib := &library{name: base.acquire.lib.name + "_aw"}
	lib.code = strings.Replace(base.acquire.lib.code, base.acquire.lib.name, lib.name, -1) +
		"redis.register_function('" + lib.name + "_check', function(keys, args)\nKEYS, ARGV = keys, args\n" +
		mustRead("now.lua") + checkWrote + "end)\n"
	if err := c.FunctionLoad(ctx, lib.code).Err(); err != nil {
		t.Fatal(err)
	}
	withCheck := *base
	for _, pr := range []*program{&withCheck.acquire, &withCheck.exact, &withCheck.refund, &withCheck.bucket} {
		pr.lib, pr.fn = lib, lib.name+"_"+strings.TrimPrefix(pr.fn, base.acquire.lib.name+"_")
		pr.fnArg = pr.fn
	}
	for _, p := range ps {
		p.scripts = &withCheck
	}
	rng := rand.New(rand.NewPCG(1, 2))
	mkey := ps[0].keys(s.prefix, "k", true, false)[1]
	demands := []int64{1, 3, 50, 199, 200, 250, 999, 1000, 5000, 30000}
	checked := 0
	for step := range 3000 {
		m := fmt.Sprintf("m%d", rng.IntN(40))
		p := ps[rng.IntN(len(ps))]
		demand := demands[rng.IntN(len(demands))]
		horizon := time.Duration(20+rng.IntN(400)) * time.Millisecond
		switch op := rng.IntN(20); {
		case op < 18:
			if _, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 1, Max: int64(1 + rng.IntN(20)),
				Member: m, Demand: demand, Horizon: horizon}); err != nil {
				t.Fatal(err)
			}
		case op < 19:
			if errs := s.RefundBatch(ctx, []Grant{{Policy: p, Key: "k", Member: m}}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		default:
			time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		}
		if rng.IntN(3) > 0 {
			continue
		}
		rate := float64(p.limits[0].Rate)
		got, err := c.FCall(ctx, lib.name+"_check", []string{mkey}, "m"+fmt.Sprint(rng.IntN(40)), demands[rng.IntN(len(demands))],
			memberTTL(horizon), rate).Text()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		switch got {
		case "ok":
			checked++
		case "none":
		default:
			t.Fatalf("step %d: %s", step, got)
		}
	}
	if checked < 500 {
		t.Fatalf("only %d calls found what their library wrote", checked)
	}
}

// memberTTL is members.lua's member_ttl.
func memberTTL(horizon time.Duration) int64 { return max(3*horizon.Microseconds(), 1_000_000) }
