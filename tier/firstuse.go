package tier

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/ratelease/ratelease/remote"
)

// firstUses remembers which keys were decided lately, and how often (once
// or twice), by a fingerprint of each (policy, key) in a fixed table: a
// key's first two decisions are made as exact mode makes them, one Redis
// call each with no entry made, and the key gets an entry (and leases)
// from its third decision on. A key used once or twice (a per-IP limit
// under a crawl) so costs what exact decisions cost, where an entry, its
// bookkeeping and its sweeping cost the client more than a decision. The
// slot keeps the time of the key's first use too, which seeds the demand
// of the entry made at its third (Entry.Seed): the entry leases as one
// made at the second use would have.
//
// A key that another key's fingerprint pushed out before its next use is
// taken for new again, and one whose slot holds its fingerprint by chance
// is taken for seen: either costs a decision made the other way, never a
// wrong one. Safe for concurrent use; two uses at once may both be taken
// for the same one.
type firstUses struct {
	seed  maphash.Seed
	slots [firstUseSlots]atomic.Uint64
}

// firstUseSlots is how many keys firstUses remembers at most (128 KiB):
// a key's third use must come before about as many other new keys.
const firstUseSlots = 1 << 14

// A slot holds, from its high bits down: the fingerprint (the hash's bits
// above the slot's index), the first use's time in ticks of 2^tickShift
// ns (about 17 ms) modulo 2^tickBits (about 19 hours), and the uses so
// far (1 or 2; 3 once the third has made the key's entry; 0 is an empty
// slot).
const (
	tickShift = 24
	tickBits  = 22
	fpShift   = tickBits + 2
	tickMask  = 1<<tickBits - 1
	// seedTicks is how long ago (about 4.3 s) a first use may be for the
	// third to seed its entry's demand: an older one tells little (a key
	// that slow leases its requests alone), and a clock set back gives a
	// wrapped age, far past it.
	seedTicks = 1 << 8
)

func newFirstUses() *firstUses { return &firstUses{seed: maphash.MakeSeed()} }

// use counts a decision of key of p at now (ns) and reports whether it is
// among the key's first two lately (decided as exact mode decides it);
// otherwise, if known, first is the start of the tick of the key's first
// use (ns). It is known at the third use only, within seedTicks of the
// first (or, by the ticks' wrap, of a multiple of 19 h after it): not
// when the third use made the key's entry before (and it was evicted
// since: one made again starts afresh, its first uses' rate long gone).
func (f *firstUses) use(p *remote.Policy, key string, now int64) (exact bool, first int64, known bool) {
	h := maphash.String(f.seed, key) ^ maphash.String(f.seed, p.Name())*0x9e3779b97f4a7c15
	s := &f.slots[h%firstUseSlots]
	fp := h >> fpShift << fpShift
	tick := uint64(now>>tickShift) & tickMask
	v := s.Load()
	if v>>fpShift<<fpShift != fp || v&3 == 0 {
		s.Store(fp | tick<<2 | 1)
		return true, 0, false
	}
	if v&3 == 1 {
		s.Store(v&^3 | 2)
		return true, 0, false
	}
	if v&3 == 3 { // the entry was made once: one made again starts afresh
		return false, 0, false
	}
	s.Store(v | 3)
	if ago := (tick - v>>2) & tickMask; ago <= seedTicks {
		return false, (now>>tickShift - int64(ago)) << tickShift, true // the first use's tick's start
	}
	return false, 0, false
}
