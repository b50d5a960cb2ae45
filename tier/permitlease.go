package tier

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// permitPools are an engine's pools of lease-mode permits, one a key: an
// instance leases slots of a concurrency limit's key (permit.lua's lease:
// members of the key's sorted set, one expiry for all of an instance's)
// and grants permits from them, so that acquiring and releasing a permit
// is usually local:
//
//   - A permit is granted locally while a slot is free and the slots last
//     its whole TTL: they are leased for 1.5 TTLs from the lease call's
//     start, so a permit is granted locally in the first half TTL after a
//     call (and at most permitRecheck after its reply); a permit granted
//     by a call's reply counts its TTL from the call's start, so that a
//     slow call delays a grant, never prevents it; later, a call renews
//     the slots (and asks for more, and learns the others' demands). A
//     slot never outlives its expiry in Redis: the bound holds, never
//     more than the limit held across the fleet, a crashed instance's
//     slots (and permits) counted until they expire, 1.5 TTLs after its
//     last call.
//   - A permit past its TTL is lost (its Release says so) and its slot is
//     free again, as in exact mode: a stuck holder does not keep it.
//   - The slots are shared by max-min fairness over the instances'
//     demands (permits in use and asked for): under contention an
//     instance holds no more than its share, or what it uses; a release
//     then gives its slot back at once, and a free slot goes to the
//     instance that has waited longest. Otherwise a released slot stays
//     for the next acquire, and slots idle for permitLinger go back.
//   - A lease call whose reply is lost leaves this instance holding the
//     slots then in use (a call keeps them), and the next call removes
//     any it may have added (remote.PermitCall.Maybe): an acquire's, or,
//     once they are idle for permitLinger, the sweeper's, or Close's; a
//     pool that may hold some is not dropped.
//   - While a lease call is in flight, acquires wait for it: the call may
//     give back idle slots.
type permitPools struct {
	mu     sync.Mutex
	m      map[poolKey]*permitPool
	member string    // this instance's id; a pool's member id adds its limit and TTL
	base   time.Time // the time base of the pools' ns
	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool // closePermits began: no pool is made (with mu held)
	// onWait, when not nil, is called (pl.mu not held) as an acquire or
	// an extension begins to wait for a lease call in flight: tests order
	// what happens meanwhile (export_test.go).
	onWait func()
}

// poolKey names a pool: a concurrency limit's key, with its limit and
// TTL (two Concurrency values of one name but other limits keep apart
// pools, as exact mode asks with each call's limit).
type poolKey struct {
	name, key string
	limit     int64
	ttl       time.Duration
}

// permitPool is this instance's slots of one key.
type permitPool struct {
	k poolKey
	// member names the pool's slots in Redis (m#0, m#1, ...): its own, so
	// that no two pools of a key share a slot (a pool made again for a key
	// after the sweeper dropped it has the same: it held none).
	member    string
	mu        sync.Mutex
	dead      bool             // dropped by the sweeper (a new pool takes its place), or closed
	slots     int64            // leased in Redis
	inUse     map[string]int64 // permit id -> its deadline (ns)
	reapAt    int64            // no deadline in inUse is before it (reap)
	until     int64            // the slots' expiry (ns), counted from the call's start
	epoch     uint64           // bumped when the slots had expired: permits of an older epoch are lost
	held      int64            // held by all at the last reply
	contended bool             // the last reply: demands exceeded the room
	lastGrant int64            // the latest local grant (ns)
	peak      int64            // the most permits in use at once since the latest call
	maybe     int64            // slots a call whose reply was lost may have leased
	called    int64            // the start of the latest lease call (ns)
	answered  int64            // when its reply came (ns)
	calling   chan struct{}    // closed when the lease call in flight returns
}

// PermitHold is what a granted permit needs for its Release and Extend:
// its source and, for a leased one, its pool and epoch.
type PermitHold struct {
	source Source
	pool   *permitPool
	epoch  uint64
}

// permitLinger is how long slots no permit uses stay leased: the next
// acquire finds them, and they go back after it (sweepPermits).
const permitLinger = 100 * time.Millisecond

// permitRecheck is how long after a lease call permits are granted from
// its slots without another: the next call renews them and brings the
// others' demands (a busy instance learns of contention within it).
const permitRecheck = 100 * time.Millisecond

// permitSweep is how often idle slots are looked for.
const permitSweep = 50 * time.Millisecond

// leaseTTL is how long slots are leased for permits of ttl: a permit is
// granted from them in the first half TTL after a call.
func leaseTTL(ttl time.Duration) time.Duration { return ttl + ttl/2 }

func newPermitPools(clk interface{ Now() time.Time }) *permitPools {
	var id [8]byte
	_, _ = crand.Read(id[:])
	return &permitPools{m: map[poolKey]*permitPool{}, member: "~" + hex.EncodeToString(id[:]), base: clk.Now(), stop: make(chan struct{})}
}

// pnow is the pools' time (ns).
func (e *Engine) pnow() int64 { return int64(e.clock.Now().Sub(e.pools.base)) }

// pool returns k's pool, making it (and starting the sweeper with the
// first) if needed; nil once closePermits began, so that no sweeper starts
// after it waited for the last and no slots are leased after it gave them
// back.
func (e *Engine) pool(k poolKey) *permitPool {
	ps := e.pools
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil
	}
	pl := ps.m[k]
	if pl == nil {
		// The TTL whole, to the ns: pools whose TTLs differ by less than a
		// ms are apart pools, and must not share a slot.
		member := ps.member + "." + strconv.FormatInt(k.limit, 36) + "." + strconv.FormatInt(int64(k.ttl), 36)
		pl = &permitPool{k: k, member: member, inUse: map[string]int64{}}
		if len(ps.m) == 0 {
			ps.wg.Add(1)
			go e.sweepPermits()
		}
		ps.m[k] = pl
	}
	return pl
}

// acquireLeased is AcquirePermit in lease mode.
func (e *Engine) acquireLeased(ctx context.Context, k poolKey, id string) (PermitDecision, error) {
	pl := e.pool(k)
	if pl == nil {
		return PermitDecision{}, door.ErrClosed
	}
	pl.mu.Lock()
	defer func() { pl.mu.Unlock() }()
	for {
		if pl.dead {
			// Dropped by the sweeper meanwhile (it held nothing): its
			// place is a new pool's. Or closed.
			pl.mu.Unlock()
			next := e.pool(k)
			if next == nil {
				pl.mu.Lock() // for the deferred Unlock
				return PermitDecision{}, door.ErrClosed
			}
			pl = next
			pl.mu.Lock()
			continue
		}
		now := e.pnow()
		pl.reap(now)
		if d, ok := pl.grant(id, now, false); ok {
			return d, nil
		}
		if pl.calling != nil {
			if err := e.awaitCall(ctx, pl); err != nil {
				return PermitDecision{}, err
			}
			continue
		}
		u := int64(len(pl.inUse))
		want := max(u+1, pl.peak) // at least the most used at once since the last call
		if !pl.contended {
			want *= 2 // as many spare: the next acquires are local
		}
		want = max(u+1, min(want, pl.k.limit))
		r, err := e.leasePermits(ctx, pl, want, u+1)
		if err != nil {
			return PermitDecision{}, err
		}
		now = e.pnow()
		if d, ok := pl.grant(id, now, true); ok {
			d.Source = SourceRemote // the call's
			return d, nil
		}
		// Back when the first permit or slot held expires: this instance's
		// own permits free their slots here at their TTL.
		retry := r.RetryAfter
		for _, d := range pl.inUse {
			retry = min(retry, time.Duration(d-now))
		}
		return PermitDecision{Held: r.Held, RetryAfter: max(time.Microsecond, retry), Source: SourceRemote}, nil
	}
}

// grant grants a permit from a free slot of pl, with pl.mu held, if no
// lease call is in flight and the slots last the permit's TTL. A local
// grant counts the TTL from now, within permitRecheck of the latest call's
// reply; a grant from a call's reply (reply) counts it from the call's
// start, as the slots' expiry is counted: however long the call took, the
// slots it leased last the TTL of a permit it grants, so that a slow Redis
// delays a grant and never prevents it. (A call longer than the TTL grants
// a permit already past it, as exact mode does.)
func (pl *permitPool) grant(id string, now int64, reply bool) (PermitDecision, bool) {
	from := now
	if reply {
		from = pl.called
	}
	if pl.calling != nil || int64(len(pl.inUse)) >= pl.slots || from+int64(pl.k.ttl) > pl.until || !reply && now-pl.answered >= int64(permitRecheck) {
		return PermitDecision{}, false
	}
	pl.inUse[id] = from + int64(pl.k.ttl)
	pl.reapAt = min(pl.reapAt, from+int64(pl.k.ttl))
	pl.peak = max(pl.peak, int64(len(pl.inUse)))
	pl.lastGrant = now
	return PermitDecision{Granted: true, Held: pl.held - pl.slots + int64(len(pl.inUse)), Source: SourceLocal,
		Hold: PermitHold{source: SourceLocal, pool: pl, epoch: pl.epoch}}, true
}

// reap frees the slots of permits past their TTL, with pl.mu held: a walk
// of the permits in use once the first of them may have ended.
func (pl *permitPool) reap(now int64) {
	if now < pl.reapAt {
		return
	}
	pl.reapAt = math.MaxInt64
	for id, d := range pl.inUse {
		if d <= now {
			delete(pl.inUse, id)
		} else {
			pl.reapAt = min(pl.reapAt, d)
		}
	}
}

// leasePermits makes a lease call for pl, with pl.mu held (released
// meanwhile): want slots (at least those in use), a demand of demand. The
// slots are leased to cover every permit in use, and leaseTTL.
func (e *Engine) leasePermits(ctx context.Context, pl *permitPool, want, demand int64) (remote.PermitReply, error) {
	ch := make(chan struct{})
	pl.calling = ch
	start := e.pnow()
	u := int64(len(pl.inUse))
	ttl := leaseTTL(pl.k.ttl)
	for _, d := range pl.inUse {
		ttl = max(ttl, time.Duration(d-start)+time.Millisecond)
	}
	ttl = ttl.Round(time.Millisecond)
	c := remote.PermitCall{Name: pl.k.name, Key: pl.k.key, ID: pl.member, Op: remote.PermitLease,
		Limit: pl.k.limit, TTL: ttl, Slots: pl.slots, InUse: u, Want: max(want, u), Demand: demand, Maybe: pl.maybe}
	pl.mu.Unlock()
	r, err := e.door.Permit(ctx, c)
	pl.mu.Lock()
	pl.calling = nil
	close(ch)
	if err != nil {
		// Whether the call was applied is unknown: this instance holds at
		// least the slots then in use (a call keeps them), until the
		// earlier expiry, and at most the more of what it held and what
		// it asked for, which the next call clears up.
		pl.maybe = max(pl.maybe, c.Slots, c.Want)
		pl.slots = min(pl.slots, u)
		return r, err
	}
	pl.maybe = 0
	if r.Lost {
		pl.epoch++
		clear(pl.inUse)
	}
	pl.slots, pl.until, pl.held, pl.contended, pl.called, pl.answered = r.Slots, start+int64(ttl), r.Held, r.Contended, start, e.pnow()
	pl.peak = int64(len(pl.inUse))
	return r, nil
}

// releaseLeased releases a leased permit: its slot is free for the next
// acquire, or goes back at once when the key is contended. It reports
// whether the permit was held (not past its TTL, its slots not expired).
func (e *Engine) releaseLeased(ctx context.Context, h PermitHold, id string) (bool, error) {
	pl := h.pool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := e.pnow()
	d, ok := pl.inUse[id]
	if !ok || h.epoch != pl.epoch {
		return false, nil
	}
	delete(pl.inUse, id)
	held := d > now
	closed := e.closed.Load()
	if closed {
		pl.reap(now) // the slots of permits past their TTL go back too
	}
	u := int64(len(pl.inUse))
	if (held && pl.contended || closed && (pl.slots > u || pl.maybe > pl.slots)) && pl.calling == nil {
		// Others wait: the slot is theirs; or the engine closed (a
		// graceful shutdown releasing its permits, lost or not), and
		// nothing takes it here again. (Not given back, it lapses at its
		// expiry: the permit was released all the same.)
		ctx, cancel := e.door.Bound(ctx)
		_, _ = e.leasePermits(ctx, pl, u, u)
		cancel()
	}
	return held, nil
}

// awaitCall waits, with pl.mu held (released meanwhile), for the lease
// call in flight to return, or for ctx to end (its error).
func (e *Engine) awaitCall(ctx context.Context, pl *permitPool) error {
	ch := pl.calling
	pl.mu.Unlock()
	if f := e.pools.onWait; f != nil {
		f()
	}
	select {
	case <-ch:
		pl.mu.Lock()
		return nil
	case <-ctx.Done():
		pl.mu.Lock()
		return ctx.Err()
	}
}

// extendLeased makes a leased permit last ttl from now: a lease call when
// its slots expire sooner. It reports whether the permit was held.
func (e *Engine) extendLeased(ctx context.Context, h PermitHold, id string, ttl time.Duration) (bool, error) {
	pl := h.pool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	// The permit is looked at once no lease call is in flight: a call may
	// find the slots lost, and a Release or the permit's TTL may end it
	// meanwhile; an extension must not bring it back.
	for pl.calling != nil {
		if err := e.awaitCall(ctx, pl); err != nil {
			return false, err
		}
	}
	now := e.pnow()
	d, ok := pl.inUse[id]
	if !ok || h.epoch != pl.epoch || d <= now {
		return false, nil
	}
	if now+int64(ttl) <= pl.until {
		pl.inUse[id] = now + int64(ttl)
		return true, nil
	}
	if e.closed.Load() {
		return false, door.ErrClosed
	}
	pl.inUse[id] = now + int64(ttl) // the call leases the slots to cover it
	epoch := pl.epoch
	if _, err := e.leasePermits(ctx, pl, pl.slots, int64(len(pl.inUse))); err != nil {
		if _, ok := pl.inUse[id]; ok && pl.epoch == epoch {
			pl.inUse[id] = d
		}
		return false, err
	}
	_, ok = pl.inUse[id]
	return ok && pl.epoch == epoch, nil
}

// sweepPermits gives back slots idle for permitLinger (or, on a
// contended key, any idle) and drops pools with nothing leased, until no
// pool is left or the engine closes.
func (e *Engine) sweepPermits() {
	ps := e.pools
	defer ps.wg.Done()
	for {
		t := e.clock.NewTimer(permitSweep)
		select {
		case <-ps.stop:
			t.Stop()
			return
		case <-t.C():
		}
		for _, pl := range ps.all() {
			e.giveBackIdle(pl, false)
		}
		ps.mu.Lock()
		for k, pl := range ps.m {
			pl.mu.Lock()
			if pl.slots == 0 && pl.maybe == 0 && len(pl.inUse) == 0 && pl.calling == nil {
				pl.dead = true
				delete(ps.m, k)
			}
			pl.mu.Unlock()
		}
		if len(ps.m) == 0 {
			ps.mu.Unlock()
			return
		}
		ps.mu.Unlock()
	}
}

// giveBackIdle gives back pl's slots no permit uses, and those a call
// whose reply was lost may have added, when they have been idle for
// permitLinger, the key is contended, or now (at Close).
func (e *Engine) giveBackIdle(pl *permitPool, now bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	t := e.pnow()
	pl.reap(t)
	u := int64(len(pl.inUse))
	if pl.calling != nil || pl.slots <= u && pl.maybe <= pl.slots || !now && !pl.contended && t-pl.lastGrant < int64(permitLinger) {
		return
	}
	if t >= pl.until {
		// Expired in Redis, or about to (its clock may be behind, and it
		// counted their expiry from when it ran the call): the call
		// removes any left.
		pl.maybe = max(pl.maybe, pl.slots)
		pl.slots = 0
	}
	ctx, cancel := e.door.Bound(context.Background())
	defer cancel()
	_, _ = e.leasePermits(ctx, pl, u, u)
}

// closePermits stops the sweeper and gives back every idle slot, once the
// lease calls in flight have returned (an acquire's may lease spare
// slots); slots of permits in use stay until they are released (see
// releaseLeased) or expire. No pool is made or granted from after it.
func (e *Engine) closePermits() {
	ps := e.pools
	ps.mu.Lock()
	ps.closed = true
	ps.mu.Unlock()
	close(ps.stop)
	ps.wg.Wait()
	for _, pl := range ps.all() {
		pl.mu.Lock()
		for pl.calling != nil {
			_ = e.awaitCall(context.Background(), pl) // each call is bounded by the Redis timeout
		}
		pl.dead = true
		pl.mu.Unlock()
		e.giveBackIdle(pl, true)
	}
}

// all returns the pools.
func (ps *permitPools) all() []*permitPool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pools := make([]*permitPool, 0, len(ps.m))
	for _, pl := range ps.m {
		pools = append(pools, pl)
	}
	return pools
}
