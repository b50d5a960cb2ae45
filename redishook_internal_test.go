package ratelease

import (
	"testing"
	"unsafe"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// The exported constants show their values in godoc, and the docs name the
// engine's limits as numbers: these hold them to the engine's.
func TestExportedConstantsMatchTheirInternals(t *testing.T) {
	for op := door.RedisDecide; op <= door.RedisConfig; op++ {
		if redisOps[op] == "" {
			t.Errorf("the door's op %d has no name", op)
		}
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"MaxKeyLen", MaxKeyLen, remote.MaxKeyLen},
		{"MaxCharge", MaxCharge, remote.MaxCharge},
		{"a SlidingWindowLog's most units a request (Algorithm's doc)", 1000, remote.MaxLogUnits},
		{"the longest policy name (NewPolicy's doc)", 128, remote.MaxNameLen},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, the engine's %d", c.name, c.got, c.want)
		}
	}
}

// Every decision returns a Result by value: its one-byte fields sit
// together so that it stays within 120 bytes (a field's growth, such as a
// Limit's, shows here before it shows in the hit path's benchmarks).
func TestResultStaysSmall(t *testing.T) {
	if n := unsafe.Sizeof(Result{}); n > 120 {
		t.Errorf("a Result takes %d bytes, more than 120", n)
	}
}
