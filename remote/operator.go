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
	return chargeDecision(d), s.named(p, key, err)
}

// chargeDecision is d, parsed from charge.lua's reply, with its
// retry_after in RetryAfter whether or not units were charged
// (parseDecision reads a grant's as Next), and no Next or ValidFor.
func chargeDecision(d Decision) Decision {
	if d.Granted > 0 {
		d.RetryAfter = d.Next
	}
	d.Next, d.ValidFor = 0, 0
	return d
}

// ChargeFit charges each call of rs, in one pipeline, r.Max units (1 to
// MaxCharge) of r.Key under r.Policy, each limit only what it has room
// for (charge.lua with fit): what an outage admitted, charged once Redis
// is back, so that each limit is charged up to its own room and capacity,
// not the policy's smallest, and none goes into debt. r's other fields
// are not read. A Decision's Granted is the most units any limit took; the
// rest of it is as Charge's. Calls whose script the server has not cached
// (NOSCRIPT: a restarted server) are sent again with EVAL, in a second
// pipeline.
func (s *Store) ChargeFit(ctx context.Context, rs []Request) ([]Decision, []error) {
	cmds := make([]*redis.Cmd, len(rs))
	send := func(which []int, eval bool) {
		_, _ = s.client.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, i := range which {
				r := rs[i]
				sc, keys, args := r.Policy.ops().charge, r.Policy.Keys(s.prefix, r.Key), s.refundArgs(r.Policy, r.Max, 1, "", 0)
				if eval {
					cmds[i] = sc.Eval(ctx, pl, keys, args...)
				} else {
					cmds[i] = sc.EvalSha(ctx, pl, keys, args...)
				}
			}
			return nil
		}) // each call's error is its Cmd's
	}
	all := make([]int, len(rs))
	for i := range all {
		all[i] = i
	}
	send(all, false)
	var again []int
	for i, c := range cmds {
		if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		send(again, true)
	}
	ds, errs := make([]Decision, len(rs)), make([]error, len(rs))
	for i, c := range cmds {
		v, err := c.Text()
		if err == nil {
			ds[i], err = parseDecision(rs[i].Policy, v)
			ds[i] = chargeDecision(ds[i])
		}
		errs[i] = s.named(rs[i].Policy, rs[i].Key, err)
	}
	return ds, errs
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
