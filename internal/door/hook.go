package door

import (
	"context"

	"github.com/ratelease/ratelease/remote"
)

// RedisOp says what one Redis round trip does (Config.Hook).
type RedisOp uint8

// The kinds of round trip. The zero value is no call.
const (
	// RedisDecide: atomic decisions (Acquire): an exact decision, a Wait's
	// attempt or reservation, AllowAtMost; one, or those that came while
	// others were on their way, in one pipeline (keys: how many).
	RedisDecide RedisOp = iota + 1
	// RedisLease: a pipeline of leases (Batch), with the refunds queued with
	// them; or a cold key's lease (Decide), which goes as a decision does,
	// and tells the hook of the round trip that carries it when it is
	// alone or the oldest there.
	RedisLease
	// RedisRefund: units given back: a pipeline of refunds only (Batch), a
	// single Refund, the refund of late grants, GiveBack.
	RedisRefund
	// RedisCharge: the units admitted during an outage, charged once the
	// server is back (Charge), and a cost charged whatever the limits
	// have left (Debit).
	RedisCharge
	// RedisPeek, RedisReset, RedisBlock, RedisUnblock: the operators' calls.
	RedisPeek
	RedisReset
	RedisBlock
	RedisUnblock
	// RedisPing: Ping, to every master with a Redis Cluster.
	RedisPing
	// RedisConfig: the reading of a server's maxmemory-policy (CONFIG GET),
	// once per server, when events are observed (see EventWarning).
	RedisConfig
)

// RedisOutcome is what one round trip came to (Config.Hook).
type RedisOutcome struct {
	// Err is nil when every call of the round trip succeeded; else the
	// round trip's error, or its first failed call's.
	Err error
	// Failed counts its calls that failed.
	Failed int
	// Granted is the units its acquire calls were granted (RedisDecide,
	// RedisLease, RedisCharge); 0 for the others.
	Granted int64
}

// Hook is called as a round trip starts, with the context it is made for,
// what it does, and the number of calls it carries (each about one key; 0
// for RedisPing and RedisConfig). It returns the context to make it with
// (ctx or one derived from it, with no earlier end) and a function called
// once with its outcome when it ends, or nil.
type Hook func(ctx context.Context, op RedisOp, keys int) (context.Context, func(RedisOutcome))

// start tells the hook, if any, that a round trip starts: it returns the
// context to make it with and the function to give its outcome to (nil:
// none). Without a hook it costs a nil check.
func (d *Door) start(ctx context.Context, op RedisOp, keys int) (context.Context, func(RedisOutcome)) {
	if d.hook == nil {
		return ctx, nil
	}
	return d.hook(ctx, op, keys)
}

// outcome returns the RedisOutcome of a pipeline whose calls' errors are errs
// and gerrs, and whose acquire calls got ds.
func outcome(ds []remote.Decision, errs, gerrs []error) RedisOutcome {
	var o RedisOutcome
	for i, err := range errs {
		if err != nil {
			o.Failed++
			if o.Err == nil {
				o.Err = err
			}
			continue
		}
		if i < len(ds) {
			o.Granted += ds[i].Granted
		}
	}
	for _, err := range gerrs {
		if err != nil {
			o.Failed++
			if o.Err == nil {
				o.Err = err
			}
		}
	}
	return o
}

// single returns the RedisOutcome of one call whose error is err.
func single(err error, granted int64) RedisOutcome {
	if err != nil {
		return RedisOutcome{Err: err, Failed: 1}
	}
	return RedisOutcome{Granted: granted}
}
