package remote

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// permitScript is permit.lua: the permits of a concurrency limit.
var permitScript = redis.NewScript(mustRead("permit.lua"))

// PermitOp is what a permit call does: acquire a permit, release one, or
// extend one's TTL.
type PermitOp string

// The permit calls.
const (
	PermitAcquire PermitOp = "acquire"
	PermitRelease PermitOp = "release"
	PermitExtend  PermitOp = "extend"
)

// PermitCall names one permit call: the concurrency limit's name (as a
// policy's: see NewPolicy), its key, the permit's id, and, to acquire,
// the limit; to acquire or extend, the TTL (whole ms, at least 1ms).
type PermitCall struct {
	Name, Key, ID string
	Op            PermitOp
	Limit         int64
	TTL           time.Duration
}

// PermitReply is permit.lua's reply: Done (granted, or the permit was
// held), At (Redis's time, µs), Held (the permits held after the call),
// and, for a denied acquire, RetryAfter: until the first permit held
// expires (a release frees one sooner).
type PermitReply struct {
	Done       bool
	At, Held   int64
	RetryAfter time.Duration
}

// permitTail ends the key of a concurrency limit's permits: no policy's
// tail is "}:permits".
const permitTail = "}:permits"

// PermitKey returns the Redis key of name's permits of key: one key, in
// the hash slot of key's tag, as a policy's keys are.
func (s *Store) PermitKey(name, key string) string {
	return s.prefix + ":{" + name + ":" + key + permitTail
}

// Permit makes one permit call (see permit.lua), as an operator's script.
// Errors are Redis's or ctx's, naming the server.
func (s *Store) Permit(ctx context.Context, c PermitCall) (PermitReply, error) {
	k := s.PermitKey(c.Name, c.Key)
	v, err := permitScript.Run(ctx, s.client, []string{k}, string(c.Op), c.ID, c.Limit, c.TTL.Microseconds()).Int64Slice()
	if err != nil {
		return PermitReply{}, named(s.Addr(nil, ""), err)
	}
	if len(v) != 4 {
		return PermitReply{}, fmt.Errorf("remote: permit replied %d values, want 4", len(v))
	}
	return PermitReply{Done: v[0] == 1, At: v[1], Held: v[2], RetryAfter: time.Duration(v[3]) * time.Microsecond}, nil
}
