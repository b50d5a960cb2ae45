package tier

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// Every key, at any time (ticks wrapping included), is decided exactly at
// its first two uses and leases from its third, which knows its first
// use's time to a tick (and later ones, which make an entry only if the
// first was evicted, do not); a first use too long ago (half the ticks' period)
// is not known. Keys pushed out of their slot start over.
func TestFirstUsesCountsEachKey(t *testing.T) {
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	const tick = int64(1) << tickShift
	rng := rand.New(rand.NewPCG(1, 2))
	f := newFirstUses()
	for i := range 20000 {
		key := fmt.Sprint("k", i)
		now := rng.Int64N(1 << 62)
		gap := rng.Int64N(int64(tickMask/2) * tick)
		for use := 1; use <= 2; use++ {
			if exact, _, _ := f.use(p, key, now+int64(use-1)*gap/2); !exact {
				t.Fatalf("%s: use %d not exact", key, use)
			}
		}
		exact, first, known := f.use(p, key, now+gap)
		if exact || !known || first > now || first <= now-tick {
			t.Fatalf("%s: third use %v ago: exact %v, first %d known %v; want not exact, first within a tick before %d", key, time.Duration(gap), exact, first, known, now)
		}
		// Its entry made, evicted and made again: not exact, nothing known.
		if exact, _, known := f.use(p, key, now+gap+1); exact || known {
			t.Fatalf("%s: fourth use: exact %v, known %v; want neither", key, exact, known)
		}
	}
	// Long ago: not known, and still not exact.
	now := int64(1) << 50
	f.use(p, "old", now)
	f.use(p, "old", now)
	if exact, _, known := f.use(p, "old", now+int64(tickMask/2+1)*tick); exact || known {
		t.Fatalf("a first use half a tick period ago: exact %v, known %v", exact, known)
	}
	// A full table forgets: a key whose slot another took is new again.
	f = newFirstUses()
	f.use(p, "a", now)
	f.use(p, "a", now)
	for i := range 8 * firstUseSlots {
		f.use(p, fmt.Sprint("x", i), now)
	}
	if exact, _, _ := f.use(p, "a", now); !exact {
		t.Fatal("a key pushed out of its slot was taken for seen")
	}
}
