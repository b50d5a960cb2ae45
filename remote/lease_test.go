package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// lease asks for min..max units of key under p as member, wanting demand
// units per second, with a horizon of 100ms.
func lease(t *testing.T, f *fake, p *remote.Policy, member string, demand, min, max int64) remote.Decision {
	t.Helper()
	d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: min, Max: max,
		Member: member, Demand: demand, Horizon: 100 * ms})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Members are counted per key, only while they lease it, and only with a
// demand; they lapse three horizons (at least a second) after their last
// lease, and the hash goes with the last of them.
func TestMembersPerKey(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(1000, 1000, time.Second))
	if d := lease(t, f, p, "a", 10, 1, 1); d.Members != 1 {
		t.Fatalf("first member: %d", d.Members)
	}
	if d := lease(t, f, p, "b", 10, 1, 1); d.Members != 2 {
		t.Fatalf("second member: %d", d.Members)
	}
	if d := lease(t, f, p, "c", 0, 1, 1); d.Members != 0 {
		t.Fatalf("no demand, no member: %d", d.Members)
	}
	if d := acquire(t, f.s, p, "k", 1, 1, false); d.Members != 0 {
		t.Fatalf("exact: %d", d.Members)
	}
	// A member counts for its TTL (here 1s) after its last lease, and at
	// most a third longer.
	f.Advance(600 * ms)
	if d := lease(t, f, p, "b", 10, 1, 1); d.Members != 2 {
		t.Fatalf("a still counts: %d", d.Members)
	}
	f.Advance(390 * ms) // a's last lease was 990ms ago
	if d := lease(t, f, p, "b", 10, 1, 1); d.Members != 2 {
		t.Fatalf("a still counts within its TTL: %d", d.Members)
	}
	f.Advance(350 * ms) // 1.34s
	if d := lease(t, f, p, "b", 10, 1, 1); d.Members != 1 {
		t.Fatalf("a lapsed: %d", d.Members)
	}
	f.Advance(1350 * ms)
	if f.Exists("test:{p:k}:m2") {
		t.Fatal("the members hash outlived its members")
	}
}

// A member that leaves (a refund naming it: Close, an evicted key) no
// longer counts, at once; the hash goes with the last one.
func TestMemberLeaves(t *testing.T) {
	f := newFake(t)
	ctx := context.Background()
	p := mustPolicy(t, "p", tb(1000, 1000, time.Second))
	for _, m := range []string{"a", "b", "c"} {
		lease(t, f, p, m, 400, 1, 1)
	}
	for i, m := range []string{"a", "b"} {
		if errs := f.s.RefundBatch(ctx, []remote.Grant{{Policy: p, Key: "k", Member: m}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if d := lease(t, f, p, "c", 400, 1, 1); d.Members != int64(2-i) {
			t.Fatalf("after %s left: %d members", m, d.Members)
		}
	}
	// c, alone, wants 400 of 1000: no share holds it.
	if d := lease(t, f, p, "c", 400, 1, 900); d.Granted != 900 {
		t.Fatalf("c alone: %+v", d)
	}
	if errs := f.s.RefundBatch(ctx, []remote.Grant{{Policy: p, Key: "k", Member: "c"}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if f.Exists("test:{p:k}:m2") {
		t.Fatal("the members hash outlived its last member")
	}
}

// The entries of members that lapsed are swept a few at a time, while
// they outnumber the live: a fleet that turns over (deploys) leaves no
// hash that grows without bound.
func TestLapsedMembersAreSwept(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(1000, 1000, time.Second))
	for i := range 200 {
		lease(t, f, p, fmt.Sprintf("old%d", i), 10, 1, 1)
	}
	// The new member keeps the hash alive while every old one lapses.
	for range 14 {
		f.Advance(100 * ms)
		lease(t, f, p, "new", 10, 1, 1)
	}
	for i := range 100 {
		if d := lease(t, f, p, "new", 10, 1, 1); d.Members != 1 {
			t.Fatalf("call %d: %d members, want the new one alone", i, d.Members)
		}
		f.Advance(ms)
	}
	if keys, _ := f.HKeys("test:{p:k}:m2"); len(keys) > 2+2+16 {
		n := len(keys)
		t.Fatalf("%d fields left in the members hash, want the live member's and the aggregates' (and the sweep's slack)", n)
	}
}

// While the demand fits in the rate, a member takes what it asks for.
func TestNoCapWithoutScarcity(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(100, 100, time.Second))
	lease(t, f, p, "a", 30, 1, 1)
	if d := lease(t, f, p, "b", 60, 1, 90); d.Granted != 90 {
		t.Fatalf("granted %d, want all 90 asked for (demand 90 of 100)", d.Granted)
	}
}

// A member held to its share takes two batches at a time from its own
// bucket, and its part of the room no member's bucket holds (the spare)
// besides, by fair rate: left in the key's bucket the spare would overflow
// the capacity while the members wait for their batches, and taken whole
// by whoever asks first it would go by who is quickest. What the key's
// bucket holds past half its capacity is the first asker's, up to the
// spare: members asking on time keep the bucket under its half (a batch
// is at most a member's part of it), and left there (the others quiet, or
// late) it would overflow rather than be taken. Short of room, it
// is not back before its share or the room beyond the others' buckets has
// made a batch, whichever comes first: the denial says when.
func TestFairShareWaitsForABatch(t *testing.T) {
	f := newFake(t)
	// Two members wanting 1000/s each of 1000/s with a burst of 100: the
	// room is always short of what they want over a horizon (200).
	p := mustPolicy(t, "p", tb(1000, 100, time.Second))
	lease(t, f, p, "a", 1000, 1, 1)
	// Each share is 500/s; a batch 5 units (a tenth of 100ms at 500/s),
	// which is what each bucket holds. a's bucket, full, keeps 5 units of
	// the room from b.
	var grants []int64
	var d remote.Decision
	for range 12 {
		if d = lease(t, f, p, "b", 1000, 1, 1000); d.Granted == 0 {
			break
		}
		grants = append(grants, d.Granted)
	}
	// 99 left after a's unit, of which a's bucket keeps 5: the room
	// beyond it is 94, b's bucket 5 of it, the spare 89. b takes two
	// batches and what the key's bucket holds past its half (49, more
	// than half the spare: a's share is as much as b's): 10 + 49; then,
	// its bucket empty, two batches and half of the spare's 35 left (the
	// key's bucket is under its half); then the last 8. a's bucket is
	// full, so the room beyond it grows at
	// the limit's 1000/s and makes b's batch in 5ms (b's own share, at
	// 500/s, in 10ms).
	if fmt.Sprint(grants) != "[59 27 8]" || d.RetryAfter != 5*ms {
		t.Fatalf("grants %v, then %+v; want two batches and what is past the key's half, then half the spare, until the room beyond a's bucket (94) is spent, then a wait until the room beyond a's bucket makes a batch (5 more units at 1000/s)", grants, d)
	}
	f.Advance(5 * ms)
	// Room 5 + 5, less a's 5: b's batch.
	if d := lease(t, f, p, "b", 1000, 1, 1000); d.Granted != 5 {
		t.Fatalf("b when its batch is there: %+v, want 5", d)
	}
}

// A member's bucket keeps its batch from the others while the member
// leases, and for LAPSE (3) of its batches' time after its last lease, no
// longer: a member whose demand stopped leaves the room to those still
// asking, where its claim would hold it back until the key's bucket filled
// and the rest overflowed (a demand that shifts between instances).
func TestAnIdleMembersBucketLapses(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(1000, 100, time.Second))
	// Shares of 500/s each, a batch of 5: b's batch is 10ms of its share.
	lease(t, f, p, "a", 1000, 1, 1)
	lease(t, f, p, "b", 1000, 1, 1)
	// drain has a lease until denied, and returns what is left in the
	// key's bucket then.
	drain := func() int64 {
		for range 100 {
			d := lease(t, f, p, "a", 1000, 1, 1000)
			if d.Granted == 0 {
				return d.Remaining
			}
		}
		t.Fatal("a was never denied")
		return 0
	}
	drain()
	// 29ms after b's lease, b's bucket is full (5): a leaves it.
	f.Advance(29 * ms)
	if left := drain(); left < 5 {
		t.Fatalf("a left %d, 29ms after b's last lease, want b's batch (5) at least", left)
	}
	// Past 30ms (3 of b's batches' time) since b's lease, b claims
	// nothing: a takes all but less than its own batch.
	f.Advance(2 * ms)
	if left := drain(); left >= 5 {
		t.Fatalf("a left %d, 31ms after b's last lease, want less than a batch: b's bucket lapsed", left)
	}
	// b asks again (denied: a took the room): its bucket claims again.
	lease(t, f, p, "b", 1000, 1, 1)
	f.Advance(10 * ms)
	if left := drain(); left < 5 {
		t.Fatalf("a left %d, 10ms after b leased again, want b's batch (5) at least", left)
	}
}

// A member that keeps leasing keeps its bucket from the others, though
// idle members share its generation: the buckets of a generation lapse
// only once every other member's last lease into it is old (a first cut
// took the generation's mean lease, which six idle members pulled back,
// and A's bucket went with theirs).
func TestALeasingMembersBucketHoldsBesideIdleOnes(t *testing.T) {
	for _, idle := range []int{0, 6} {
		t.Run(fmt.Sprintf("idle=%d", idle), func(t *testing.T) {
			f := newFake(t)
			p := mustPolicy(t, "p", tb(10000, 1000, time.Second))
			for i := range idle {
				lease(t, f, p, fmt.Sprintf("I%d", i), 10000, 1, 1)
			}
			lease(t, f, p, "A", 1000, 1, 1)
			lease(t, f, p, "X", 10000, 1, 1)
			drain := func() int64 {
				for range 1000 {
					if d := lease(t, f, p, "X", 10000, 1, 1000); d.Granted == 0 {
						return d.Remaining
					}
				}
				t.Fatal("X was never denied")
				return 0
			}
			drain()
			for range 10 {
				f.Advance(10 * ms)
				lease(t, f, p, "A", 1000, 1, 1) // A asks every batch
			}
			if left := drain(); left < 9 {
				t.Errorf("X left %d, want A's bucket (9) at least: A leased just now", left)
			}
		})
	}
}

// From a bucket, a member whose own bucket holds its batch but who finds
// the limit short (here a caller outside the shares took it all) is owed
// that batch: it is told to come back when the limit has made it, not half
// a batch of its share later. (The members' buckets may hold more than the
// limit does; put off longer, the limit would fill up unused meanwhile.)
func TestFairShareOwedBatchComesBackWhenTheLimitHasIt(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(1000, 100, time.Second))
	for _, m := range []string{"a", "b", "c"} {
		lease(t, f, p, m, 1000, 1, 1)
	}
	// Shares of 333/s, batches of 3 (a tenth of 100ms of 333/s); the
	// buckets are full. An exact caller takes the 97 units left.
	if d := acquire(t, f.s, p, "k", 97, 97, false); d.Granted != 97 {
		t.Fatalf("the exact caller: %+v, want 97", d)
	}
	if d := lease(t, f, p, "a", 1000, 1, 100); d.Granted != 0 || d.RetryAfter != ms || d.Next != 3*ms {
		t.Fatalf("a at an empty limit, its bucket full: %+v, want denied, told the limit's 1ms for its request, and back when the limit has made a's batch of 3 at 1000/s (Next 3ms)", d)
	}
	f.Advance(3 * ms)
	if d := lease(t, f, p, "a", 1000, 1, 100); d.Granted != 3 {
		t.Fatalf("a when the limit has its batch: %+v, want 3", d)
	}
}

// Members whose demands fit in the rate but who find the limit empty (an
// estimate lags a demand that grew) are not back before the limit has made
// a batch of the asker's demand (a tenth of a horizon of it, at most its
// part of the capacity), rather than for every unit as it frees up. A
// member alone is told the limit's own time.
func TestEmptyLimitWithDemandsThatFit(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(1000, 100, time.Second))
	if d := lease(t, f, p, "a", 500, 1, 100); d.Granted != 100 {
		t.Fatalf("a alone, demand fitting: %+v, want all 100", d)
	}
	if d := lease(t, f, p, "a", 500, 1, 100); d.Granted != 0 || d.RetryAfter != ms {
		t.Fatalf("a alone at an empty limit: %+v, want denied for the next unit (1ms)", d)
	}
	// b's demand and a's fit in 1000/s: no shares, but the limit is empty.
	if d := lease(t, f, p, "b", 500, 1, 100); d.Granted != 0 || d.RetryAfter != ms || d.Next != 5*ms || d.Members != 2 {
		t.Fatalf("b at an empty limit beside a: %+v, want denied, told the limit's 1ms, and back once a batch of 5 (50ms of 500/s / 10) is made (Next 5ms)", d)
	}
}

// With plenty of room there is nothing to share: a member takes what it
// asks for, even wanting more than the rate.
func TestPlentyOfRoomTakesAll(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(100, 1000, time.Second))
	lease(t, f, p, "a", 1000, 1, 1)
	if d := lease(t, f, p, "a", 1000, 1, 99); d.Granted != 99 || d.RetryAfter != 0 || d.Next != 0 {
		t.Fatalf("%+v: want all 99 asked for (room 999, a horizon's demand 100)", d)
	}
}

// Units handed back with a lease are given back before the grant.
func TestBackInTheLeaseCall(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(10, 10, time.Hour))
	first := acquire(t, f.s, p, "k", 10, 10, false)
	d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 4, Max: 4, Back: 4, BackAt: first.At})
	if err != nil || d.Granted != 4 {
		t.Fatalf("with 4 back: %+v, %v", d, err)
	}
	if d := acquire(t, f.s, p, "k", 1, 1, false); d.Granted != 0 {
		t.Fatalf("more came back than was given: %+v", d)
	}
}

func TestValidFor(t *testing.T) {
	f := newFake(t)
	f.Advance(250 * ms)
	for _, c := range []struct {
		limits []remote.Limit
		want   time.Duration
	}{
		{[]remote.Limit{tb(10, 10, time.Second)}, -1},
		{[]remote.Limit{win(remote.FixedWindow, 10, time.Second)}, 750 * ms},
		{[]remote.Limit{win(remote.SlidingWindowCounter, 10, time.Minute)}, time.Minute - 250*ms},
		{[]remote.Limit{tb(10, 10, time.Second), win(remote.FixedWindow, 100, time.Minute), win(remote.FixedWindow, 10, time.Second)}, 750 * ms},
	} {
		p := mustPolicy(t, fmt.Sprintf("p%d", len(c.limits)), c.limits...)
		d := acquire(t, f.s, p, "k", 1, 1, false)
		if d.ValidFor != c.want {
			t.Errorf("%v: ValidFor %v, want %v", c.limits, d.ValidFor, c.want)
		}
	}
}

func TestBatchesOnRealRedis(t *testing.T) {
	s, c := realStore(t)
	ctx := context.Background()
	p := mustPolicy(t, "p", tb(10, 10, time.Hour))
	q := mustPolicy(t, "q", win(remote.FixedWindow, 5, time.Hour))
	if err := c.ScriptFlush(ctx).Err(); err != nil { // the batch must load what it needs
		t.Fatal(err)
	}
	rs := []remote.Request{{Policy: p, Key: "a", Min: 1, Max: 4}, {Policy: q, Key: "b", Min: 1, Max: 9}, {Policy: p, Key: "a", Min: 7, Max: 7}}
	ds, errs := s.AcquireBatch(ctx, rs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if ds[0].Granted != 4 || ds[1].Granted != 5 || ds[2].Granted != 0 {
		t.Fatalf("granted %d %d %d, want 4, 5 and a denial", ds[0].Granted, ds[1].Granted, ds[2].Granted)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	errs = s.RefundBatch(ctx, []remote.Grant{{Policy: p, Key: "a", Units: 4, At: ds[0].At}, {Policy: q, Key: "b", Units: 5, At: ds[1].At}})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("refund %d: %v", i, err)
		}
	}
	if d := acquire(t, s, p, "a", 10, 10, false); d.Granted != 10 {
		t.Fatalf("after the batch refund: %+v", d)
	}
	if d := acquire(t, s, q, "b", 5, 5, false); d.Granted != 5 {
		t.Fatalf("after the batch refund: %+v", d)
	}
}

// The fair share divides the limit that gives the least over a horizon:
// here the per-second one, though the hourly one has the smaller rate (it
// has room for hours). A member denied by it waits for its share of it (a
// unit a second, of two members' 2/s), not for a batch of the hourly
// share. Once the hourly one runs short, it is the one divided.
func TestFairShareDenialByAnotherLimit(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(2, 2, time.Second), tb(100, 100, time.Hour))
	for _, m := range []string{"a", "b"} {
		lease(t, f, p, m, 1000, 1, 1)
	}
	d := lease(t, f, p, "a", 1000, 1, 1)
	if d.Granted != 0 || d.Decider != 0 || d.RetryAfter <= 0 || d.RetryAfter > time.Second {
		t.Fatalf("%+v: want a denial by the per-second limit, back within its share's second", d)
	}
	q := mustPolicy(t, "q", tb(100, 100, time.Second), tb(3, 3, time.Hour))
	for _, m := range []string{"a", "b", "a"} {
		lease(t, f, q, m, 1000, 1, 1)
	}
	if d := lease(t, f, q, "a", 1000, 1, 1); d.Granted != 0 || d.Decider != 1 {
		t.Fatalf("%+v: want a denial by the hourly limit, short of room", d)
	}
}

// A window in which its members meet (they did not all know of each other
// as it opened: a fleet's start, a flood's first window) is paced: its room
// counts as made at an even rate from the window's start until a horizon
// after the newest member joined, so that the member that leases first
// cannot take the window before the others are known. Once the pace ends,
// what is left of the window is there to take. (A sliding window counter
// after a quiet window has its room at once, as a fixed window does.)
func TestWindowWhereMembersMeetIsPaced(t *testing.T) {
	for _, alg := range []remote.Algorithm{remote.FixedWindow, remote.SlidingWindowCounter} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) { windowWhereMembersMeet(t, alg) })
	}
}

func windowWhereMembersMeet(t *testing.T, alg remote.Algorithm) {
	f := newFake(t)
	p := mustPolicy(t, "p", win(alg, 1000, time.Second))
	// 100ms into a window.
	f.Advance(time.Second - time.Duration(redistest.Epoch.UnixMicro()%1e6)*time.Microsecond + 100*ms)
	lease(t, f, p, "a", 5000, 1, 1) // alone on a window: as asked
	lease(t, f, p, "b", 5000, 1, 1) // b joins
	take := func() (got int64) {
		for range 2000 {
			d := lease(t, f, p, "a", 5000, 1, 1000)
			if d.Granted == 0 {
				return got
			}
			got += d.Granted
		}
		t.Fatal("a was never denied")
		return 0
	}
	// The pace runs until a horizon (100ms) after b joined: halfway
	// through it, half of the window's 1000 units are made, 2 of them
	// taken, and b's bucket keeps up to a batch (5 units at its share of
	// 500/s) of the rest; a is denied once less than a batch is left.
	if got := take(); got < 498-10 || got > 498 {
		t.Fatalf("a took %d while the window is paced, want the 498 made, less up to a batch each of a and b", got)
	}
	f.Advance(100 * ms)
	// The pace is over: all but b's batch of the window's rest. (From a
	// window, b's bucket keeps it however long b is silent: the window's
	// room does not overflow, it ends.)
	if got := take(); got < 500-10 || got > 500 {
		t.Fatalf("a took %d once the pace ended, want the window's other 500 less b's batch", got)
	}
}

// A member of a longer horizon counts for its own TTL even when the newest
// members' are shorter: the hash lives as long as its longest-lived
// generation, not its newest.
func TestLongerHorizonOutlivesTheNewest(t *testing.T) {
	f := newFake(t)
	ctx := context.Background()
	p := mustPolicy(t, "p", tb(1000, 1000, time.Second))
	acq := func(member string, horizon time.Duration) remote.Decision {
		t.Helper()
		d, err := f.s.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1, Member: member, Demand: 10, Horizon: horizon})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	acq("long", 600*ms) // TTL 1.8s
	f.Advance(590 * ms)
	acq("long", 600*ms) // counts until 2.39s
	f.Advance(110 * ms)
	acq("short", 100*ms) // TTL 1s, in a generation of its own that lapses sooner
	f.Advance(1500 * ms) // 2.2s
	if d := acq("short", 100*ms); d.Members != 2 {
		t.Fatalf("at 2.2s: %d members, want long's (its TTL runs to 2.39s) and short's", d.Members)
	}
}

// A whole window's room (a fixed window's, there at once when it opens)
// is shared by the members that flood it, window after window, whatever
// their number, demands and the window's size: with room beyond what they
// want over a horizon yet short of what they want until the window ends,
// no member takes it all in debt and leaves the others nothing until the
// next. Each member gets at least 0.8 of its max-min part of every window
// after the first (where they meet). Seeded; RATELEASE_SEED replays.
func TestWholeWindowIsShared(t *testing.T) {
	t.Parallel() // simulated time on a miniredis of its own: CPU only, beside the others
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("RATELEASE_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("RATELEASE_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for round := range 5 {
		f := newFake(t)
		rate := 200 + rng.Int64N(4000)
		p := mustPolicy(t, "p", win(remote.FixedWindow, rate, time.Second))
		members := 2 + rng.IntN(5)
		demands := make([]float64, members)
		for i := range demands {
			demands[i] = float64(rate) * (0.2 + 2*rng.Float64())
		}
		parts := redistest.WaterFill(float64(rate), demands)
		f.Advance(time.Second - time.Duration(f.Now().UnixNano()%int64(time.Second)))
		got := make([]int64, members)
		for w := range 3 {
			clear(got)
			for range 250 { // 4ms steps: a window
				f.Advance(4 * ms)
				for _, m := range rng.Perm(members) {
					// Each asks for a horizon's demand (100ms), as a Leaser does.
					want := max(1, int64(demands[m]/10))
					got[m] += lease(t, f, p, fmt.Sprintf("m%d", m), int64(demands[m]), 1, want).Granted
				}
			}
			if w == 0 {
				continue // where they meet
			}
			for m := range members {
				if float64(got[m]) < 0.8*parts[m]-2 {
					t.Fatalf("round %d (rate %d, demands %.0f), window %d: member %d got %v of its part %.0f; all got %v",
						round, rate, demands, w, m, got[m], parts[m], got)
				}
			}
		}
	}
}
