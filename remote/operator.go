package remote

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// opScripts are the scripts of the operators' calls for one set of
// algorithms: peek.lua, giveback.lua and charge.lua.
type opScripts struct {
	peek, giveBack, charge *redis.Script
}

// opCache holds the operators' scripts of every algorithm set used so far,
// by the set's bit mask, as scriptCache does.
var opCache [1 << numAlgorithms]atomic.Pointer[opScripts]

// ops returns p's operators' scripts, assembling them on first use.
func (p *Policy) ops() *opScripts {
	if s := opCache[p.uses].Load(); s != nil {
		return s
	}
	s := &opScripts{
		peek:     redis.NewScript(assemble(p.uses, "peek.lua")),
		giveBack: redis.NewScript(assemble(p.uses, "giveback.lua")),
		charge:   redis.NewScript(assemble(p.uses, "charge.lua")),
	}
	opCache[p.uses].CompareAndSwap(nil, s)
	return opCache[p.uses].Load()
}

// Peek returns what Acquire would decide for one unit of key now (Min =
// Max = 1, no Reserve, no Member), charging nothing: Granted is 1 or 0,
// and Remaining is the decider's room before any charge (see peek.lua).
// Wait, ValidFor and Members are 0.
func (s *Store) Peek(ctx context.Context, p *Policy, key string) (Decision, error) {
	v, err := p.ops().peek.Run(ctx, s.client, p.keys(s.prefix, key, false, true), s.refundArgs(p, 0, 0, "", 0)...).Text()
	if err != nil {
		return Decision{}, s.named(p, key, err)
	}
	d, err := parseDecision(p, v)
	d.ValidFor = 0
	return d, s.named(p, key, err)
}

// GiveBack gives units back to every limit of key, as if they had been
// granted now and not used (see giveback.lua for each algorithm), never
// above a limit's capacity. units above MaxCapacity could give nothing
// more back: the caller caps them.
func (s *Store) GiveBack(ctx context.Context, p *Policy, key string, units int64) error {
	if units <= 0 {
		return nil
	}
	return s.named(p, key, p.ops().giveBack.Run(ctx, s.client, p.Keys(s.prefix, key), s.refundArgs(p, units, 0, "", 0)...).Err())
}

// MaxCharge is the most units one Charge takes: a charge is a cost already
// incurred, so it may pass every limit, by far. (A bucket's debt stops
// growing at 2^53 / period units, where its state would stop being exact:
// see charge.lua.)
const MaxCharge = 1 << 40

// Charge charges units (1 to MaxCharge) to every limit of key whatever
// they have left (see charge.lua): a limit charged past its room owes the
// rest, and denies until it is paid off. The Decision is the key's after
// the charge, of its decider, the limit where one unit fits last: Granted
// is units, RetryAfter when one unit fits again (0: now), Debt what the
// decider owes, Remaining and ResetAfter its own. A block of key does not
// stop it.
func (s *Store) Charge(ctx context.Context, p *Policy, key string, units int64) (Decision, error) {
	v, err := p.ops().charge.Run(ctx, s.client, p.Keys(s.prefix, key), s.refundArgs(p, units, 0, "", 0)...).Text()
	if err != nil {
		return Decision{}, s.named(p, key, err)
	}
	d, err := parseDecision(p, v)
	// (parseDecision reads a grant's retry_after as Next.)
	d.RetryAfter, d.Next, d.ValidFor = d.Next, 0, 0
	return d, s.named(p, key, err)
}

// Reset deletes key's state under p, every limit's and the key's members
// hash, with one DEL: the keys share one hash slot. It leaves a block of
// the key in place (Unblock lifts it).
func (s *Store) Reset(ctx context.Context, p *Policy, key string) error {
	return s.named(p, key, s.client.Del(ctx, p.keys(s.prefix, key, true, false)...).Err())
}

// Block blocks key under p for d (whole milliseconds, at least one): until
// it lapses, or Unblock, acquire.lua and peek.lua deny the key, charging
// nothing, with the block's time left as retry_after. A block set again
// replaces the time left. The block is one key, <prefix>:{<policy>:<key>}:b,
// with a TTL of d (SET PX), in the key's hash slot.
func (s *Store) Block(ctx context.Context, p *Policy, key string, d time.Duration) error {
	ms := max(1, (d+time.Millisecond-1)/time.Millisecond) // rounded up
	return s.named(p, key, s.client.Do(ctx, "SET", p.blockKey(s.prefix, key), "1", "PX", int64(ms)).Err())
}

// Unblock lifts a block of key under p (a DEL); none is no error.
func (s *Store) Unblock(ctx context.Context, p *Policy, key string) error {
	return s.named(p, key, s.client.Del(ctx, p.blockKey(s.prefix, key)).Err())
}

// blockKey is the key of key's block under p.
func (p *Policy) blockKey(prefix, key string) string {
	return prefix + ":{" + p.name + ":" + key + blockTail
}

// MaxCapacity is the largest capacity of the policy's limits: the most
// units a refund can give back to any of them.
func (p *Policy) MaxCapacity() int64 {
	var c int64
	for _, l := range p.limits {
		c = max(c, l.Capacity())
	}
	return c
}
