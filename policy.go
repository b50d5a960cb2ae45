package ratelease

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ratelease/ratelease/remote"
)

// MaxKeyLen is the longest key, in bytes. A key may hold any bytes,
// braces included.
const MaxKeyLen = 1024

// MaxLogUnits is the most units one request may take from a policy with a
// SlidingWindowLog (its Capacity is at most this): the log writes one entry
// per unit, so a request's time in Redis grows with its units, and Redis
// serves no other client meanwhile: a request's cost must not stall a
// shared Redis.
const MaxLogUnits = 1000

// MaxPolicyNameLen is the longest policy name, in bytes.
const MaxPolicyNameLen = 128

// Policy is a named set of limits that all apply to every key: a request is
// admitted only when every limit admits it, and a denial by one limit
// charges none. Make it with NewPolicy; a Policy is immutable, safe for
// concurrent use, and may be shared by any number of Limiters.
type Policy struct {
	name     string
	limits   []Limit
	compiled *remote.Policy
	// shadow: a would-be denial is admitted (see Shadow).
	shadow bool
}

// NewPolicy validates and compiles a policy. The name is part of every Redis
// key of the policy: 1 to MaxPolicyNameLen bytes, without ':', '{', '}' or
// whitespace; else the error wraps ErrInvalidPolicy. Limits: 1 to 16 (all
// must admit), each valid as documented on Limit's fields, no two of the
// same Algorithm and Period; else the error wraps ErrInvalidLimit.
//
// Validation happens here once; Allow and Wait only check n and the key.
//
// A policy made with the name of another and other limits redefines the
// name in a Limiter from its first use there; keys carry their usage over,
// and the earlier policy is refused a second later (see docs/operations.md,
// "Limits changed while running").
func NewPolicy(name string, limits ...Limit) (*Policy, error) {
	rl := make([]remote.Limit, len(limits))
	for i, l := range limits {
		if l.Algorithm < TokenBucket || l.Algorithm > CalendarWindow {
			return nil, fmt.Errorf("%w: policy %q: limit %d: unknown algorithm %d (TokenBucket to CalendarWindow: %d to %d)",
				ErrInvalidLimit, name, i, int(l.Algorithm), int(TokenBucket), int(CalendarWindow))
		}
		rl[i] = l.resolved()
	}
	compiled, err := remote.NewPolicy(name, rl)
	switch {
	case errors.Is(err, remote.ErrInvalidPolicy):
		return nil, rootErr(err)
	case err != nil:
		// remote's words, less its own "invalid limit: ": ErrInvalidLimit
		// says it once.
		detail := strings.Replace(err.Error(), remote.ErrInvalidLimit.Error()+": ", "", 1)
		return nil, fmt.Errorf("%w: policy %q: %s", ErrInvalidLimit, name, detail)
	}
	p := &Policy{name: name, limits: make([]Limit, len(limits)), compiled: compiled}
	for i, l := range limits {
		p.limits[i] = l
		p.limits[i].Burst = int(rl[i].Burst)
		p.limits[i].Period = rl[i].Period // a CalendarWindow's nominal length
		if l.Calendar != (Calendar{}) {
			p.limits[i].Calendar.Location = rl[i].Calendar.Location // nil: UTC
		}
	}
	return p, nil
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

// Limits returns a copy of the policy's limits, with Burst filled in.
func (p *Policy) Limits() []Limit { return append([]Limit(nil), p.limits...) }

// Capacity returns the most units one request can ever be admitted: the
// smallest Burst (Rate for windows) of the policy's limits.
func (p *Policy) Capacity() int { return int(p.compiled.Capacity()) }

// Shadow returns a policy with p's name and limits in shadow mode, to roll
// a new limit out safely: it shares p's state in Redis and in the Limiter
// (the same keys, the same counters; p itself is unchanged), and its
// decisions are made and counted as p's, but a would-be denial is admitted:
// its Result has Allowed true, Shadowed true, Granted n (AllowAtMost: n,
// at most the capacity), and the rest of the denial's fields (Limit, Remaining,
// RetryAfter, ResetAfter, Source, Blocked) as they were; nothing is charged
// for it, in Redis or from a local allowance, and it counts in
// PolicyStats.ShadowDenied (as well as in Denied). What would be admitted
// is admitted and charged as usual. A shadow policy never makes WaitN wait:
// WaitN is AllowN (a LeakyBucket does not queue), and a would-be denial
// returns nil at once. A blocked key (Block) is a would-be denial too.
// Errors are not decisions: they are returned as usual. Shadow of a shadow
// policy returns it.
func (p *Policy) Shadow() *Policy {
	if p.shadow {
		return p
	}
	s := *p
	s.shadow = true
	return &s
}

// Shadowed reports whether p is in shadow mode (see Shadow).
func (p *Policy) Shadowed() bool { return p.shadow }
