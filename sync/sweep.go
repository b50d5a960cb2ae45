package sync

import (
	"context"
	"time"

	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
)

// keep tells whether units of e that lapsed at now are worth setting
// aside to go back: not when a refund could no longer give anything back.
func (l *Leaser) keep(e *Entry, now int64) local.Keep {
	p, redisNow := e.Policy(), now/1e3+l.offset.Load()
	return func(units, at int64) bool { return p.Refundable(units, at, redisNow) }
}

// lapsed counts units that lapsed unused: set aside, or dropped.
func (l *Leaser) lapsed(lp local.Lapsed) {
	l.stats.expired.Add(uint64(lp.Units))
	l.stats.dropped.Add(uint64(lp.Units - lp.Aside))
}

// evicted gives back what e held when it left its table (evicted, or at
// Close): its units, those set aside for its next lease, and with the units
// its place among the key's members, so that its demand stops counting.
func (l *Leaser) evicted(e *Entry, units, at int64) {
	l.goneHits.Add(e.Hits())
	l.stats.goneUsed.Add(uint64(e.Taken())) // final: e is gone
	back, backAt := e.DrainBack()
	l.giveBack(e, back, backAt)
	if e.Members() > 0 && (units > 0 || e.Shared()) {
		// Leave the key's members, so that this demand stops counting in
		// the others' shares: with the refund, at no cost; or on its own
		// for a key shared out. Any other membership lapses within three
		// horizons, which costs no command per key at Close.
		l.batcher.queueBack(remote.Grant{Policy: e.Policy(), Key: e.Key(), Units: units, At: at, Member: l.id})
		return
	}
	l.giveBack(e, units, at)
}

// giveBack queues a refund of units granted at at.
func (l *Leaser) giveBack(e *Entry, units, at int64) {
	if units > 0 {
		l.batcher.queueBack(remote.Grant{Policy: e.Policy(), Key: e.Key(), Units: units, At: at})
	}
}

// Forget drops what e holds of its key, which was reset (see
// Entry.Forget), and counts the units dropped.
func (l *Leaser) Forget(e *Entry) {
	l.stats.dropped.Add(uint64(e.Forget()))
}

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
		l.bound.Range(func(e *Entry) bool {
			l.lapsed(e.Lapse(now, l.keep(e, now)))
			// Set aside a sweep ago, and no lease is being made or applied
			// to take them along: they go on their own.
			back, at := e.DrainOldBack(now - int64(every))
			l.giveBack(e, back, at)
			return true
		})
	}
}

// Close refunds every unit held and stops the goroutines. It returns when
// they are done, within about one Redis timeout even when Redis does not
// answer (calls in flight end by their own timeouts, which started earlier;
// what Close sends shares one). Guarded calls that outlived their deadline
// are the door's: its owner's Close waits for them, after this one. Units
// Redis does not take back return by themselves when their keys' state
// expires. Idempotent.
func (l *Leaser) Close() {
	ctx, cancel := l.door.Bound(context.Background())
	defer cancel()
	// No lease begins after this, nor a due (those that began are
	// counted: stopped changes under duesMu).
	l.duesMu.Lock()
	stopped := l.stopped.Swap(true)
	l.duesMu.Unlock()
	if stopped {
		return
	}
	l.batcher.closing(ctx) // no lease is queued after this; what is sent is bounded by ctx
	// The leases under way end (the batcher still answers them; those it
	// refused put back what they took along): then nothing is held
	// outside the entries.
	l.waitLeases(ctx)
	l.bound.Clear()   // queues the refunds of every unit held
	close(l.stop)     // the sweeper and the dues stop
	l.wg.Wait()       // (its last refunds are queued)
	l.dues.Wait()     // (their timers are stopped)
	l.batcher.close() // leases still in flight land, and are refunded (their entries are gone); what is queued is sent
	// Every call is answered: the leases under way end in a moment (a
	// prefetch's goroutine, a request's lease), and none outlives Close.
	last, cancelLast := l.door.Bound(context.Background())
	defer cancelLast()
	l.waitLeases(last)
	if l.own != nil {
		l.own.Stop()
	}
}

// waitLeases returns once no lease is under way, or ctx has ended.
func (l *Leaser) waitLeases(ctx context.Context) {
	for l.leasing.Load() > 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Microsecond) // the wall clock: a poll of a counter, which an injected test clock would never end
	}
}

// LocalHits returns the number of requests answered from allowances, ever:
// the hits of every entry, evicted ones included. It walks every entry:
// for Stats, not for the hot path.
func (l *Leaser) LocalHits() uint64 {
	n := l.goneHits.Load()
	l.bound.Range(func(e *Entry) bool { n += e.Hits(); return true })
	return n
}

// returning counts units on their way back (for the batcher).
func (l *Leaser) returning(units int64) { l.stats.returning.Add(units) }

// countLease counts the answer d to the lease request r (for the batcher):
// the units r gave back went back with it.
func (l *Leaser) countLease(r remote.Request, d remote.Decision) {
	l.stats.leases.Add(1)
	l.stats.leased.Add(uint64(d.Granted))
	l.countRefund(r.Back, true)
	if d.Granted == 0 {
		l.stats.denied.Add(1)
	}
}

// countRefund counts units of a refund, which Redis took (ok) or not (for
// the batcher).
func (l *Leaser) countRefund(units int64, ok bool) {
	if units <= 0 {
		return
	}
	l.stats.returning.Add(-units)
	if ok {
		l.stats.refunded.Add(uint64(units))
	} else {
		l.stats.dropped.Add(uint64(units))
	}
}

// Stats returns a snapshot of the counters. It walks every entry (for
// UnitsUsed and UnitsHeld): for statistics, not for the hot path.
func (l *Leaser) Stats() Stats {
	s := &l.stats
	// The door's calls are the Leaser's: its pipelines, and its cold
	// leases and first uses, which go as exact decisions (send).
	b := l.door.Total()
	// Read what was leased last, so that a lease landing meanwhile is not
	// counted as held or used without being counted as leased.
	used, held := s.used.Load()+s.goneUsed.Load(), s.returning.Load()
	l.bound.Range(func(e *Entry) bool {
		used += uint64(e.Taken())
		held += e.Units() + e.Back()
		return true
	})
	return Stats{
		Leases: s.leases.Load(), Denied: s.denied.Load(),
		RoundTrips: b.RoundTrips, Errors: b.Errors,
		UnitsLeased:   s.leased.Load() + b.LateGranted,
		UnitsRefunded: s.refunded.Load() + b.LateRefunded, UnitsExpired: s.expired.Load(),
		UnitsUsed: used, UnitsDropped: s.dropped.Load() + (b.LateGranted - b.LateRefunded), UnitsHeld: uint64(max(0, held)),
		Instances: l.Instances(), Keys: uint64(l.bound.Len()),
	}
}

// Block applies a block of e's key, just set in Redis for left, to e: its
// units are given back (queued for the batcher; the block denies the key,
// but not the key's other instances' use of them once it lapses), and its
// denial is recorded as a block, for left or TTL, whichever ends first (any
// instance may lift a block: Unblock). A lease in flight gives its grant
// back when it lands (Entry.Block).
func (l *Leaser) Block(e *Entry, left time.Duration) {
	now := l.Now()
	units, at := e.Block(now+int64(left), now+int64(min(left, l.cfg.TTL)))
	l.giveBack(e, units, at)
}
