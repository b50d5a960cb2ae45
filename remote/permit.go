package remote

import (
	"context"
	"fmt"
	"time"
)

// PermitOp is what a permit call does: acquire a permit, release one, or
// extend one's TTL.
type PermitOp string

// The permit calls.
const (
	PermitAcquire PermitOp = "acquire"
	PermitRelease PermitOp = "release"
	PermitExtend  PermitOp = "extend"
	// PermitLease holds, renews or gives back a member's slots (lease
	// mode): see permit.lua.
	PermitLease PermitOp = "lease"
)

// PermitCall names one permit call: the concurrency limit's name (as a
// policy's: see NewPolicy), its key, the permit's id (a lease's: the
// member's), and, to acquire or lease, the limit; to acquire, extend or
// lease, the TTL (whole ms, at least 1ms). A lease names the member's
// Slots held, of them InUse, the slots it Wants after the call (at least
// InUse) and its Demand (in use and asked for).
type PermitCall struct {
	Name, Key, ID string
	Op            PermitOp
	Limit         int64
	TTL           time.Duration

	Slots, InUse, Want, Demand int64
	// Maybe is how many slots the member may hold after a lease call
	// whose reply it did not get: those past Slots are removed.
	Maybe int64
}

// PermitReply is permit.lua's reply: Done (granted, or the permit was
// held), At (Redis's time, µs), Held (the permits held after the call, a
// lease's slots included), and, for a denied acquire, RetryAfter: until
// the first permit held expires (a release frees one sooner). A lease's
// reply has Slots (the member's, after the call; RetryAfter is set when
// they are no more than its InUse), Lost (its slots had expired before
// the call), Contended (the members' demands exceeded the room) and Share
// (its fair share then).
type PermitReply struct {
	Done       bool
	At, Held   int64
	RetryAfter time.Duration

	Slots, Share    int64
	Lost, Contended bool
}

// Permit makes one permit call (see permit.lua).
// Errors are Redis's or ctx's, naming the server.
func (s *Store) Permit(ctx context.Context, c PermitCall) (PermitReply, error) {
	k := s.PermitKey(c.Name, c.Key)
	keys, values := []string{k}, 4
	lease := c.Op == PermitLease
	if lease {
		// The members that lease the key: "}:permits:m", which no
		// policy's tail is.
		keys, values = append(keys, k+":m"), 7
	}
	args := append(make([]any, room(keys), room(keys)+9), string(c.Op), c.ID, c.Limit, c.TTL.Microseconds())
	if lease {
		args = append(args, c.Slots, c.InUse, c.Want, c.Demand, c.Maybe)
	}
	v, err := s.run(ctx, permitProgram(), keys, args).Int64Slice()
	if err != nil {
		return PermitReply{}, named(s.Addr(nil, ""), err)
	}
	if len(v) != values {
		return PermitReply{}, fmt.Errorf("remote: permit %s replied %d values, want %d", c.Op, len(v), values)
	}
	r := PermitReply{At: v[1], Held: v[2], RetryAfter: time.Duration(v[3]) * time.Microsecond}
	if lease {
		r.Slots, r.Lost, r.Contended, r.Share = v[0], v[4] == 1, v[5] == 1, v[6]
	} else {
		r.Done = v[0] == 1
	}
	return r, nil
}
