package tier

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/ratelease/ratelease/remote"
)

// firstUses remembers which keys were decided lately, by a fingerprint of
// each (policy, key) in a fixed table: a key's first decision is made as
// exact mode makes it, one Redis call with no entry made, and the key gets
// an entry (and leases) from its second decision on. A key used once (a
// per-IP limit under a crawl) so costs what an exact decision costs, where
// an entry, a lease call and a trip through the batcher cost twice its
// bytes. A key that another key's fingerprint pushed out before its second
// use is taken for new again, and one whose slot holds its fingerprint by
// chance is taken for seen: either costs a decision made the other way,
// never a wrong one. Safe for concurrent use.
type firstUses struct {
	seed  maphash.Seed
	slots [firstUseSlots]atomic.Uint64
}

// firstUseSlots is how many keys firstUses remembers at most (128 KiB):
// a key's second use must come before about as many other new keys.
const firstUseSlots = 1 << 14

func newFirstUses() *firstUses { return &firstUses{seed: maphash.MakeSeed()} }

// first reports whether key of p was not decided lately, and remembers it.
func (f *firstUses) first(p *remote.Policy, key string) bool {
	fp := (maphash.String(f.seed, key) ^ maphash.String(f.seed, p.Name())*0x9e3779b97f4a7c15) | 1 // never 0, an empty slot's
	s := &f.slots[fp%firstUseSlots]
	if s.Load() == fp {
		return false
	}
	s.Store(fp)
	return true
}
