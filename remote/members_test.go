package remote_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// TestMembershipAgainstAModel drives a key's members at random (leases
// with changing demands and horizons, leaves, lapses, the clock jumping
// forward) and checks after every step that the key's aggregates (the
// members hash's '#' field, members.lua) are what its live entries add up
// to: every live member counted once, in one generation, its demand in its
// class, the sums those of its entry; that the reply's member count is the
// model's (every member that leased within its TTL counts, and none past
// 4/3 of the longest TTL of a lease); and that the hash goes once nobody is left. Seeded; set
// RATELEASE_SEED to replay a failure.
func TestMembershipAgainstAModel(t *testing.T) {
	t.Parallel() // simulated time on a miniredis of its own: CPU only, beside the others
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("RATELEASE_SEED"), 10, 64); err == nil {
		seed = s
	}
	rounds := 40
	if testing.Short() {
		rounds = 8
	}
	for r := range rounds {
		s := seed + uint64(r)
		if !t.Run(fmt.Sprint(s), func(t *testing.T) { membershipModel(t, s) }) {
			t.Fatalf("replay with RATELEASE_SEED=%d", s)
		}
	}
}

func membershipModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	f := newFake(t)
	ctx := context.Background()
	p := mustPolicy(t, "p", tb(1000, 1000, time.Second))
	const hash = "test:{p:k}:m2"
	// lastLease: member -> the Redis time (us) of its last lease and its
	// TTL (us), as members.lua counts it (member_ttl).
	type seen struct{ at, ttl int64 }
	last := map[string]seen{}
	now := func() int64 { return f.Now().UnixMicro() }
	var longest int64
	for step := range 150 {
		m := fmt.Sprintf("m%d", rng.IntN(12))
		switch op := rng.IntN(10); {
		case op < 7: // a lease
			horizon := time.Duration(50+rng.IntN(600)) * time.Millisecond
			demand := int64(1 + rng.IntN(3000))
			d, err := f.s.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: int64(1 + rng.IntN(50)),
				Member: m, Demand: demand, Horizon: horizon})
			if err != nil {
				t.Fatal(err)
			}
			last[m] = seen{now(), max(3*horizon.Microseconds(), 1_000_000)}
			// Every member whose TTL has not passed counts, none past 4/3
			// of the longest TTL of a lease (a generation is a third of
			// the longest TTL of the leases in it, and lives four).
			longest = max(longest, last[m].ttl)
			least, most := int64(0), int64(0)
			for _, s := range last {
				if now()-s.at < s.ttl {
					least++
				}
				if now()-s.at < longest*4/3+1 {
					most++
				}
			}
			if d.Members < least || d.Members > most {
				t.Fatalf("step %d: %d members, want between %d and %d", step, d.Members, least, most)
			}
		case op < 8: // a leave
			if errs := f.s.RefundBatch(ctx, []remote.Grant{{Policy: p, Key: "k", Member: m}}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			delete(last, m)
		default:
			f.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
		checkAggregates(t, f, hash, step)
	}
	f.Advance(3 * time.Second) // past 4/3 of the longest TTL
	if f.Exists(hash) {
		t.Fatal("the members hash outlived its members")
	}
}

// checkAggregates fails t unless the aggregates of the members hash are
// what its live entries add up to.
func checkAggregates(t *testing.T, f *fake, hash string, step int) {
	t.Helper()
	if !f.Exists(hash) {
		return
	}
	agg := f.HGet(hash, "#")
	if agg == "" {
		t.Fatalf("step %d: a members hash without aggregates", step)
	}
	type gen struct {
		n, d      int64
		classes   map[int64][2]int64
		t, fr, ft float64
		z         float64
		l1, l2, b int64
		ats       []int64 // the live entries' last leases
		batch     int64   // the longest of the live entries' batch times (us)
	}
	gens := map[int64]*gen{}
	parts := strings.Split(agg, ";")
	for _, g := range parts[1:] {
		v := strings.Fields(g)
		start, _ := strconv.ParseInt(v[0], 10, 64)
		x := &gen{classes: map[int64][2]int64{}}
		x.t, _ = strconv.ParseFloat(v[2], 64)
		x.fr, _ = strconv.ParseFloat(v[3], 64)
		x.ft, _ = strconv.ParseFloat(v[4], 64)
		x.z, _ = strconv.ParseFloat(v[5], 64)
		x.l1, _ = strconv.ParseInt(v[6], 10, 64)
		x.l2, _ = strconv.ParseInt(v[7], 10, 64)
		x.b, _ = strconv.ParseInt(v[8], 10, 64)
		for i := 9; i+2 <= len(v)-1; i += 3 {
			idx, _ := strconv.ParseInt(v[i], 10, 64)
			c, _ := strconv.ParseInt(v[i+1], 10, 64)
			s, _ := strconv.ParseInt(v[i+2], 10, 64)
			if c <= 0 {
				t.Fatalf("step %d: class %d of %d members in %q", step, idx, c, agg)
			}
			x.classes[idx] = [2]int64{c, s}
			x.n += c
			x.d += s
		}
		gens[start] = x
	}
	// The live entries, generation by generation.
	want := map[int64]*gen{}
	keys, _ := f.HKeys(hash)
	for _, k := range keys {
		if k == "#" {
			continue
		}
		v := strings.Fields(f.HGet(hash, k))
		g, _ := strconv.ParseInt(v[0], 10, 64)
		if gens[g] == nil {
			continue // lapsed: not yet swept
		}
		d, _ := strconv.ParseInt(v[1], 10, 64)
		at, _ := strconv.ParseInt(v[3], 10, 64)
		fr, _ := strconv.ParseFloat(v[5], 64)
		size, _ := strconv.ParseFloat(v[6], 64)
		uw, _ := strconv.ParseInt(v[8], 10, 64)
		tk := size
		if v[2] != "x" {
			tk, _ = strconv.ParseFloat(v[2], 64)
			tk = max(0, tk)
		}
		if uw > 0 {
			tk = 0
		}
		w := want[g]
		if w == nil {
			w = &gen{classes: map[int64][2]int64{}}
			want[g] = w
		}
		idx, _ := strconv.ParseInt(v[9], 10, 64) // the class it was counted in
		c := w.classes[idx]
		w.classes[idx] = [2]int64{c[0] + 1, c[1] + d}
		w.n++
		w.d += d
		w.t += tk
		w.fr += fr
		w.ft += fr * float64(at-g) / 1e6
		w.z += size
		w.ats = append(w.ats, at)
		if fr > 0 {
			w.batch = max(w.batch, int64(math.Ceil(size/fr*1e6)))
		}
	}
	for start, g := range gens {
		w := want[start]
		if w == nil {
			t.Fatalf("step %d: generation %d counts %d members, none live in the hash: %q", step, start, g.n, agg)
		}
		if g.n != w.n || g.d != w.d || fmt.Sprint(g.classes) != fmt.Sprint(w.classes) {
			t.Fatalf("step %d: generation %d: %d members of demand %d in %v; the entries: %d of %d in %v (%q)",
				step, start, g.n, g.d, g.classes, w.n, w.d, w.classes, agg)
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(a), math.Abs(b)) }
		if !near(g.t, w.t) || !near(g.fr, w.fr) || !near(g.ft, w.ft) || !near(g.z, w.z) {
			t.Fatalf("step %d: generation %d sums T F FT Z = %v %v %v %v; the entries' %v %v %v %v",
				step, start, g.t, g.fr, g.ft, g.z, w.t, w.fr, w.ft, w.z)
		}
		// L1 is never older than an entry's lease, nor L2 than that of
		// any but the entry that made L1 (leases at the same us of
		// Redis's clock are not told apart); B is the longest batch time.
		for i, at := range w.ats {
			tied := slices.Contains(w.ats[:i], at) || slices.Contains(w.ats[i+1:], at)
			if at > g.l1 || at < g.l1 && at > g.l2 && !tied {
				t.Fatalf("step %d: generation %d: an entry leased at %d, its L1 L2 are %d %d (%q)", step, start, at, g.l1, g.l2, agg)
			}
		}
		if g.b < w.batch {
			t.Fatalf("step %d: generation %d: B %d, an entry's batch time %d (%q)", step, start, g.b, w.batch, agg)
		}
	}
	for start, w := range want {
		if gens[start] == nil {
			t.Fatalf("step %d: %d live entries in generation %d, which the aggregates do not hold", step, w.n, start)
		}
	}
}
