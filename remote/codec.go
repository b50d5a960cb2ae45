package remote

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Keys returns the Redis keys of key under p, one per limit, in the layout
// prefix:{policy:key}:<algorithm>:<period µs>. All of them carry one hash
// tag, so they share a Cluster slot whatever bytes key holds: a '}' in key
// ends the tag early, but identically for every limit of that key. Distinct
// (policy, key) pairs never share a Redis key: the policy name has no ':',
// and every tail starts with '}', which no tail contains twice.
//
// The keys are substrings of one string: one allocation for the text.
func (p *Policy) Keys(prefix, key string) []string { return p.keys(prefix, key, false, false) }

// membersTail ends the key of the members hash of a (policy, key) (see
// members.lua): like the limits' tails it starts with '}', and no limit's
// tail starts with "}:m". Its number is the hash's format: a change to
// the hash's fields takes the next, so that a build before it and one
// after can run on one Redis, each with its own hash (the key's state
// they share; each counts its own members). 2: each generation's '#'
// aggregates carry its last leases (L1, L2) and its longest batch (B).
const membersTail = "}:m2"

// blockTail ends the key of a (policy, key)'s block (see Store.Block): no
// other tail is "}:b".
const blockTail = "}:b"

// keys is Keys, with the members hash's key after the limits' when members
// is set, and the block's key last when block is set.
func (p *Policy) keys(prefix, key string, members, block bool) []string {
	n := len(p.limits)
	var buf [MaxLimits + 2]string // on the stack: no allocation of its own
	tails, tailsLen := append(buf[:0], p.tails[:n]...), p.tailsLen
	if members {
		tails, tailsLen = append(tails, membersTail), tailsLen+len(membersTail)
	}
	if block {
		tails, tailsLen = append(tails, blockTail), tailsLen+len(blockTail)
	}
	head := len(prefix) + 2 + len(p.name) + 1 + len(key) // prefix ":{" name ":" key
	var b strings.Builder
	b.Grow(head*len(tails) + tailsLen)
	for _, t := range tails {
		b.WriteString(prefix)
		b.WriteString(":{")
		b.WriteString(p.name)
		b.WriteByte(':')
		b.WriteString(key)
		b.WriteString(t)
	}
	all := b.String()
	keys := make([]string, len(tails))
	off := 0
	for i, t := range tails {
		n := head + len(t)
		keys[i] = all[off : off+n]
		off += n
	}
	return keys
}

// blockKey is the key of key's block under p.
func (p *Policy) blockKey(prefix, key string) string {
	return prefix + ":{" + p.name + ":" + key + blockTail
}

// permitTail ends the key of a concurrency limit's permits: no policy's
// tail is "}:permits".
const permitTail = "}:permits"

// PermitKey returns the Redis key of name's permits of key: one key, in
// the hash slot of key's tag, as a policy's keys are.
func (s *Store) PermitKey(name, key string) string {
	return s.prefix + ":{" + name + ":" + key + permitTail
}

// acquireKeys returns the keys of r: its limits' state, the members hash
// when r names a member with demand, and the key's block.
func (s *Store) acquireKeys(r Request) []string {
	return r.Policy.keys(s.prefix, r.Key, r.member() != "", true)
}

// program is the entry point that decides r: exact.lua's when r names no
// member, which has no members or fair share to read, and bucket.lua's
// when, besides, r's policy is one bucket and r does not reserve.
func (r Request) program() *program {
	switch {
	case r.member() != "":
		return &r.Policy.scripts.acquire
	case r.bucket():
		return &r.Policy.scripts.bucket
	}
	return &r.Policy.scripts.exact
}

// bucket reports whether bucket.lua decides r.
func (r Request) bucket() bool { return r.Policy.oneBucket && !r.Reserve && r.member() == "" }

// member is the member r names to the script: none without a demand.
func (r Request) member() string {
	if r.Demand <= 0 {
		return ""
	}
	return r.Member
}

// header is the number of ARGV values before the limits (acquire.lua,
// refund.lua); exactHeader, exact.lua's, which has no member's values
// (bucket.lua's is one fewer: no reserve).
const (
	header      = 8
	exactHeader = 3
)

// args returns the ARGV of r's program, after lead values left free (see
// room).
func (s *Store) args(r Request, lead int) []any {
	if r.member() == "" {
		return s.exactArgs(r, lead)
	}
	return s.acquireArgs(r, lead)
}

// acquireArgs returns acquire.lua's ARGV for r, after lead values left free.
func (s *Store) acquireArgs(r Request, lead int) []any {
	limits := s.limitArgs(r.Policy)
	args := make([]any, lead, lead+header+len(limits))
	args = append(args, r.Min, r.Max, r.reserve(), r.member(), max(0, r.Demand), max(0, r.Back), r.BackAt, r.Horizon.Microseconds())
	return append(args, limits...)
}

// exactArgs returns exact.lua's (or bucket.lua's) ARGV for r, after lead
// values left free: back and back_at follow the limits only when units go
// back.
func (s *Store) exactArgs(r Request, lead int) []any {
	limits := s.limitArgs(r.Policy)
	back := 0
	if r.Back > 0 {
		back = 2
	}
	args := make([]any, lead, lead+exactHeader+len(limits)+back)
	args = append(args, r.Min, r.Max)
	if !r.bucket() {
		args = append(args, r.reserve())
	}
	args = append(args, limits...)
	if back > 0 {
		args = append(args, r.Back, r.BackAt)
	}
	return args
}

// limitArgs returns the ARGV values of p's limits (see prelude.lua's
// limit), those of a CalendarWindow for the window of this host's time
// (see Policy.calendarArgs).
func (s *Store) limitArgs(p *Policy) []any {
	if len(p.calendars) == 0 {
		return p.args
	}
	return p.calendarArgs(s.clock.Now())
}

// reserve is r.Reserve as the scripts read it.
func (r Request) reserve() int {
	if r.Reserve {
		return 1
	}
	if r.Refill {
		return 2
	}
	return 0
}

// refundArgs returns the ARGV of a refund, after lead values left free
// (see room).
func (s *Store) refundArgs(p *Policy, units, at int64, member string, lead int) []any {
	limits := s.limitArgs(p)
	args := make([]any, lead, lead+header+len(limits))
	args = append(args, units, at, member, 0, 0, 0, 0, 0)
	return append(args, limits...)
}

// parseDecision reads a decision's reply (see prelude.lua's reply): four
// to ten integers, those left off 0, and charge.lua's eleventh, the debt,
// in decimal, separated by spaces.
func parseDecision(p *Policy, reply string) (Decision, error) {
	var n [11]int64
	k := 0
	for rest := reply; rest != ""; k++ {
		field, tail, _ := strings.Cut(rest, " ")
		if k == len(n) {
			return Decision{}, fmt.Errorf("remote: acquire replied %q, more than %d values", reply, len(n))
		}
		x, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return Decision{}, fmt.Errorf("remote: acquire replied %q: %w", reply, err)
		}
		n[k], rest = x, tail
	}
	if k < 4 {
		return Decision{}, fmt.Errorf("remote: acquire replied %q, %d values, want 4 to %d", reply, k, len(n))
	}
	d := Decision{
		Granted:    n[0],
		At:         n[1],
		Remaining:  n[2],
		ResetAfter: time.Duration(n[3]) * time.Microsecond,
		ValidFor:   time.Duration(n[4]) * time.Microsecond,
		RetryAfter: time.Duration(n[5]) * time.Microsecond,
		Decider:    int(n[6]),
		Wait:       time.Duration(n[7]) * time.Microsecond,
		Members:    n[8],
		Blocked:    n[9] == 1,
		FairShare:  n[9] == 2,
		Debt:       n[10],
	}
	if d.Granted == 0 {
		// The script's wait of a denial is when the member asks again.
		d.Next, d.Wait = d.Wait, 0
	} else {
		// The script's retry_after of a grant is the next batch's time.
		d.Next, d.RetryAfter = d.RetryAfter, 0
		if n[4] == 0 { // the script's 0: no limit of its own
			d.ValidFor = -1
		}
	}
	if d.Decider < 0 || d.Decider >= len(p.limits) {
		return Decision{}, fmt.Errorf("remote: acquire named limit %d of %d", n[6], len(p.limits))
	}
	return d, nil
}
