package tier

import (
	"sync"
	"testing"
)

// A decision that found its policy's state just before the state was let
// go is counted once, in the totals of dropped policies: however the
// counting goroutines and the drop interleave, nothing is lost and
// nothing counted twice.
func TestCountRacingADropIsKept(t *testing.T) {
	for round := range 200 {
		e := &Engine{}
		e.tables.others = &others{}
		st := &policy{}
		const goroutines, each = 4, 50
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range goroutines {
			wg.Go(func() {
				<-start
				for range each {
					c := &st.counts // found before the drop, counted after it
					e.countIn(c, nil, SourceRemote, true, -1)
				}
			})
		}
		wg.Go(func() {
			<-start
			e.tables.others.dropped.fold(st)
		})
		close(start)
		wg.Wait()
		got := e.tables.others.dropped.load()
		left := st.counts.load()
		if got.Remote+left.Remote != goroutines*each || got.Allowed+left.Allowed != goroutines*each {
			t.Fatalf("round %d: dropped %+v, left in the state %+v; want %d remote decisions in all", round, got, left, goroutines*each)
		}
		if left != (PolicyStats{}) {
			t.Fatalf("round %d: %+v left in a dropped state's counters", round, left)
		}
	}
}
