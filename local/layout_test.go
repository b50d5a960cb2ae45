package local

import (
	"testing"
	"unsafe"
)

// cur.units must not share a cache line with what a take of one unit
// reads: prev's units and the expiries (see allowance). A line is 64
// bytes and the allowance may start anywhere in one, so each of those must
// start at least 64 bytes past cur.units.
func TestCurUnitsHaveALineOfTheirOwn(t *testing.T) {
	var a allowance
	units := unsafe.Offsetof(a.cur) + unsafe.Offsetof(a.cur.units)
	for name, off := range map[string]uintptr{
		"prev.units":  unsafe.Offsetof(a.prev) + unsafe.Offsetof(a.prev.units),
		"curExpires":  unsafe.Offsetof(a.curExpires),
		"prevExpires": unsafe.Offsetof(a.prevExpires),
	} {
		if off < units+64 {
			t.Errorf("%s at byte %d, cur.units at %d: less than a cache line apart", name, off, units)
		}
	}
}
