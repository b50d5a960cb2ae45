package sync

import (
	"context"
	"time"

	"github.com/ratelease/ratelease/local"
)

// sweeper, every quarter TTL, sets aside the units that lapsed unused, and
// gives back on their own those set aside a sweep ago that no lease of
// their key has taken along meanwhile.
func (l *Leaser) sweeper() {
	defer l.wg.Done()
	every := max(l.cfg.TTL/4, time.Millisecond)
	for {
		t := l.clock.NewTimer(every)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C():
		}
		now := l.Now()
		l.bound.Range(func(e *local.Entry) bool {
			if u, at := e.DrainExpired(now); u > 0 {
				l.lapsed(e, u, at, now)
			}
			if !e.Mu.TryLock() { // a lease is being made or applied: next time
				return true
			}
			back, at := e.Back, e.BackAt
			if back > 0 && now-e.BackSince >= int64(every) && e.Leasing == nil {
				e.Back = 0
			} else {
				back = 0
			}
			e.Mu.Unlock()
			l.giveBack(e, back, at)
			return true
		})
	}
}

// Close refunds every unit held and stops the goroutines. It returns when
// they are done, within about one Redis timeout even when Redis does not
// answer (calls in flight end by their own timeouts, which started earlier;
// what Close sends shares one). With Config.Guard, calls that outlived
// their deadline are waited for until that bound only: they end at the
// client's own timeouts, and refund what they were granted. Units Redis does
// not take back return by themselves when their keys' state expires.
// Idempotent.
func (l *Leaser) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
	defer cancel()
	l.mu.Lock()
	first := !l.stopped.Swap(true) // no lease starts after this
	if first {
		l.closeCtx = ctx
	}
	l.mu.Unlock()
	if !first {
		return
	}
	l.bound.Clear()  // queues the refunds of every unit held
	l.pending.Wait() // leases in flight land, and are refunded (their entries are gone)
	close(l.stop)    // the batcher sends what is queued, then stops
	l.wg.Wait()
	l.guards.Close(ctx) // guarded calls past their deadline: until Close's own
	if l.own != nil {
		l.own.Stop()
	}
}

// LocalHits returns the number of requests answered from allowances, ever:
// the hits of every entry, evicted ones included. It walks every entry:
// for Stats, not for the hot path.
func (l *Leaser) LocalHits() uint64 {
	n := l.goneHits.Load()
	l.bound.Range(func(e *local.Entry) bool { n += e.Hits(); return true })
	return n
}

// Stats returns a snapshot of the counters.
func (l *Leaser) Stats() Stats {
	s := &l.stats
	return Stats{
		Leases: s.leases.Load(), Denied: s.denied.Load(),
		RoundTrips: s.roundTrips.Load(), Errors: s.errors.Load(),
		UnitsLeased: s.leased.Load(), UnitsRefunded: s.refunded.Load(), UnitsExpired: s.expired.Load(),
		Instances: l.Instances(),
	}
}
