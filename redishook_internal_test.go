package ratelease

import (
	"testing"

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
