package door

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/ratelease/ratelease/remote"
)

// ErrEvictionPolicy is wrapped by the Err of an EventWarning about a
// server whose maxmemory-policy may evict limiter keys (any but
// noeviction: the keys carry TTLs, so volatile-* policies evict them too).
var ErrEvictionPolicy = errors.New("ratelease: redis may evict limiter keys")

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of events. The zero value is no event.
const (
	// EventFirstFailure: a call through a breaker failed after a healthy
	// period: the breaker is closed, and the calls through it since the
	// last one that failed have succeeded (or there were none yet). Err is
	// the failure, wrapping ErrUnavailable and Redis's error.
	EventFirstFailure EventKind = iota + 1
	// EventBreaker: a breaker changed state, to Breaker. When it opens,
	// Err is the failure that opened it (the last of a run, or the failed
	// probe's; the last failure seen when a probe was abandoned); nil
	// otherwise.
	EventBreaker
	// EventWarning: a server is configured in a way that endangers the limits;
	// Err says how (ErrEvictionPolicy).
	EventWarning
)

// String returns "first-failure", "breaker", "warning", or "unknown".
func (k EventKind) String() string {
	switch k {
	case EventFirstFailure:
		return "first-failure"
	case EventBreaker:
		return "breaker"
	case EventWarning:
		return "warning"
	}
	return "unknown"
}

// MarshalText makes the kind a word in JSON and logs, as String says it.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Event is something that happened between a Door and Redis, for its
// owner's observer.
type Event struct {
	Kind EventKind
	// Breaker is the state of Node's breaker after the event: BreakerClosed
	// for an EventFirstFailure and an EventWarning.
	Breaker BreakerState
	// Err is the event's cause (see the kinds).
	Err error
	// Node names the server: with a Redis Cluster the master's address,
	// with a Ring the shard's (EventWarning only), else "".
	Node string
}

// notifier hands events to the observer in the order they happened, on
// a goroutine that posted one, holding no lock while the observer runs.
// Events are posted under the lock that orders what they report (a
// breaker's), and delivered after it is released: the first goroutine to
// deliver delivers the events the others post meanwhile, so the observer
// is never called concurrently and the others never wait for it. A nil
// notifier (no observer) posts nothing.
type notifier struct {
	events  func(Event)
	mu      sync.Mutex
	queue   []Event // requires mu held
	running bool    // requires mu held: a goroutine is delivering
}

// newNotifier returns a notifier for events, nil for nil.
func newNotifier(events func(Event)) *notifier {
	if events == nil {
		return nil
	}
	return &notifier{events: events}
}

// post queues ev for the observer.
func (n *notifier) post(ev Event) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, ev)
	n.mu.Unlock()
}

// deliver hands the queued events to the observer, unless another
// goroutine is delivering (it delivers them). Call it holding no lock.
func (n *notifier) deliver() {
	if n == nil {
		return
	}
	for {
		n.mu.Lock()
		if n.running || len(n.queue) == 0 {
			n.mu.Unlock()
			return
		}
		q := n.queue
		n.queue, n.running = nil, true
		n.mu.Unlock()
		n.run(q)
	}
}

// run calls the observer with each of q, in order; its panic
// goes on up, leaving the notifier able to deliver the next events.
func (n *notifier) run(q []Event) {
	defer func() {
		n.mu.Lock()
		n.running = false
		n.mu.Unlock()
	}()
	for _, ev := range q {
		n.events(ev)
	}
}

// evictionTries is how many times a breaker's servers are read for their
// eviction policy when the readings fail.
const evictionTries = 3

// checkEviction reads, once per breaker, the maxmemory-policy of the
// servers behind b, on a goroutine of its own (Close waits for it, within
// its timeout), and posts an EventWarning for each that may evict limiter
// keys. The reading is a round trip like the others: counted, and told to
// the hook (RedisConfig). It runs after a call through b succeeded
// (Leave): the first time the Door reaches a server, off the caller's
// path; a reading that fails is made again after a later success, up to
// evictionTries readings. Only when events are observed (else b is marked
// checked at birth).
func (d *Door) checkEviction(b *breaker) {
	if !b.checked.CompareAndSwap(false, true) {
		return
	}
	d.guards.Go(func() {
		ctx, end := d.start(context.Background(), RedisConfig, 0)
		ctx, cancel := d.Bound(ctx)
		defer cancel()
		policies, err := d.store.MaxmemoryPolicies(ctx, b.node)
		if end != nil {
			end(single(err, 0))
		}
		d.single.roundTrips.Add(1)
		if err != nil && !remote.Refused(err) {
			// Not a refusal of CONFIG (silent: an ACL without it, a managed
			// Redis), but a failure (a timeout under load): counted, and
			// read again after a later call succeeds, a few times at most.
			d.single.errors.Add(1)
			if b.checks.Add(1) < evictionTries {
				b.checked.Store(false)
			}
		}
		posted := false
		for _, addr := range slices.Sorted(maps.Keys(policies)) {
			if p := policies[addr]; p != "noeviction" {
				on := ""
				if addr != "" {
					on = " on " + addr
				}
				d.note.post(Event{Kind: EventWarning, Node: addr,
					Err: fmt.Errorf("%w: maxmemory-policy %s%s (use noeviction, or a Redis of its own)", ErrEvictionPolicy, p, on)})
				posted = true
			}
		}
		if posted { // else the events of calls stay with their callers
			d.note.deliver()
		}
	})
}
