package systest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// TestUnitsAreConserved runs several instances with a small key store
// (WithMaxKeys) over many keys, with requests of every kind the engine
// leases for (Allow, AllowN, Wait, WaitN) from goroutines that pause at
// random, leases lapsing (a short TTL, and each instance quiet now and
// then for longer), evictions all the time, and each
// instance closed at a random moment while the others go on. Then it
// checks that no unit was lost or made up:
//
//   - on each instance's side (Stats): UnitsLeased = UnitsUsed +
//     UnitsRefunded + UnitsDropped, with none held after Close, and
//     UnitsUsed is exactly what the instance admitted;
//   - on Redis's side: after every instance closed, each key's state
//     holds exactly the units requests took, and the units dropped
//     (none, here: every refund is worth giving back in an hour's window
//     or a bucket that refills once a day). One policy's keys are used
//     up early, so that denials (cached, and shares) are in the mix.
func TestUnitsAreConserved(t *testing.T) {
	srv := redistest.Start(t)
	const (
		instances = 3
		workers   = 3
		keys      = 8
		maxKeys   = 4
		smallCap  = 400    // per key and hour: keys used up, denials
		windowCap = 40_000 // per key and hour
		bucketCap = 30_000 // per key, refilled once a day
	)
	run := 6 * time.Second
	if testing.Short() {
		run = 3 * time.Second
	}
	policies := []*ratelease.Policy{
		policy(t, "cons-small", ratelease.Limit{Algorithm: ratelease.FixedWindow, Rate: smallCap, Period: time.Hour}),
		policy(t, "cons-window", ratelease.Limit{Algorithm: ratelease.FixedWindow, Rate: windowCap, Period: time.Hour}),
		policy(t, "cons-bucket", ratelease.Limit{Rate: 1, Period: 24 * time.Hour, Burst: bucketCap}),
	}
	capacity := []int64{smallCap, windowCap, bucketCap}
	lc := ratelease.DefaultLeaseConfig()
	lc.TTL = 200 * time.Millisecond // leases lapse within the run, many times
	ins := newInstances(t, instances, clientsTo(t, srv.Addr), append(engine(lc), ratelease.WithMaxKeys(maxKeys))...)

	// took[p][k]: units admitted on key k of policy p, by every instance.
	var took [3][keys]atomic.Int64
	used := make([]atomic.Int64, instances)
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for i, in := range ins {
		closeAt := run/2 + time.Duration(rand.N(int64(run/2)))
		if i == 0 {
			closeAt = run // one instance lives to the end
		}
		var closed, quiet atomic.Bool
		wg.Add(1)
		go func() { // now and then the instance goes quiet for longer than a TTL: its leases lapse
			defer wg.Done()
			for !closed.Load() {
				time.Sleep(time.Duration(300+rand.IntN(400)) * time.Millisecond)
				quiet.Store(true)
				time.Sleep(lc.TTL + 100*time.Millisecond)
				quiet.Store(false)
			}
		}()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(i*workers+w)))
				for !closed.Load() {
					if quiet.Load() {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					// Low keys are hot (they stay in the key store long
					// enough for their leases to lapse), high ones churn.
					pi, k := r.IntN(len(policies)), min(r.IntN(keys), r.IntN(keys))
					p, key := policies[pi], fmt.Sprintf("k%d", k)
					n, ok, err := decide(in.l, r, p, key)
					switch {
					case errors.Is(err, ratelease.ErrClosed):
						return
					case err != nil:
						in.fail(err)
					case ok:
						took[pi][k].Add(int64(n))
						used[i].Add(int64(n))
					}
					if r.IntN(4) == 0 {
						time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // Close at a random moment, while its workers run
			defer wg.Done()
			time.Sleep(closeAt)
			if err := in.l.Close(); err != nil {
				t.Errorf("instance %d: Close: %v", i, err)
			}
			closed.Store(true)
		}()
	}
	wg.Wait()

	var dropped, refunded, expired uint64
	for i, in := range ins {
		in.check(t, fmt.Sprintf("instance %d", i))
		s := in.l.Stats()
		t.Logf("instance %d: leased %d = used %d + refunded %d + dropped %d + held %d (expired %d); %d fallback decisions",
			i, s.UnitsLeased, s.UnitsUsed, s.UnitsRefunded, s.UnitsDropped, s.UnitsHeld, s.UnitsExpired, s.Fallback)
		if s.Fallback > 0 {
			t.Fatalf("instance %d: %d decisions by the failure mode (Redis too slow for its 2 s timeout): the units cannot be accounted for", i, s.Fallback)
		}
		if s.UnitsHeld != 0 {
			t.Errorf("instance %d: %d units held after Close", i, s.UnitsHeld)
		}
		if s.UnitsLeased != s.UnitsUsed+s.UnitsRefunded+s.UnitsDropped+s.UnitsHeld {
			t.Errorf("instance %d: leased %d != used %d + refunded %d + dropped %d + held %d",
				i, s.UnitsLeased, s.UnitsUsed, s.UnitsRefunded, s.UnitsDropped, s.UnitsHeld)
		}
		if s.UnitsUsed != uint64(used[i].Load()) {
			t.Errorf("instance %d: Stats say %d units used, its requests were admitted %d", i, s.UnitsUsed, used[i].Load())
		}
		dropped += s.UnitsDropped
		refunded += s.UnitsRefunded
		expired += s.UnitsExpired
	}
	if refunded == 0 || expired == 0 {
		t.Errorf("refunded %d, expired %d: the run did not exercise refunds and lapses", refunded, expired)
	}
	if dropped != 0 {
		t.Errorf("%d units dropped, where every refund was worth giving back", dropped)
	}

	// Redis's side, read by an exact Limiter: what each key has left.
	exact := newInstance(t, dial(t, srv.Addr), ratelease.WithExact())
	var admitted, denied int64
	for pi, p := range policies {
		for k := range keys {
			res, err := exact.l.Peek(context.Background(), p, fmt.Sprintf("k%d", k))
			if err != nil {
				t.Fatal(err)
			}
			want := capacity[pi] - took[pi][k].Load()
			admitted += took[pi][k].Load()
			if want == 0 {
				denied++
			}
			// The bucket refills a unit a day: one may have come in.
			if got := int64(res.Remaining); got != want && (pi != 2 || got != want+1) {
				t.Errorf("%s k%d: Redis has %d left after every instance closed, want %d (capacity %d, requests took %d)",
					p.Name(), k, got, want, capacity[pi], took[pi][k].Load())
			}
		}
	}
	t.Logf("%d units admitted over %d keys, %d keys used up", admitted, len(policies)*keys, denied)
}

// decide makes one decision of a kind picked with r on key, and returns
// the units it asked for and whether it admitted them.
func decide(l *ratelease.Limiter, r *rand.Rand, p *ratelease.Policy, key string) (int, bool, error) {
	ctx := context.Background()
	switch n := 1 + r.IntN(4); r.IntN(4) {
	case 0:
		res, err := l.Allow(ctx, p, key)
		return 1, res.Allowed, err
	case 1:
		res, err := l.AllowN(ctx, p, key, n)
		return n, res.Allowed, err
	case 2:
		// A Wait that cannot be served soon gives up at once.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		err := l.WaitN(wctx, p, key, n)
		if err != nil && !errors.Is(err, ratelease.ErrClosed) {
			return n, false, nil
		}
		return n, err == nil, err
	default:
		res, err := l.AllowN(ctx, p, key, 1)
		return 1, res.Allowed, err
	}
}
