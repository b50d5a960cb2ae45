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
	// tight, of a worldwide policy (see Worldwide), is the limit its
	// regional pools mirror: the one each decision names.
	tight int
}

// NewPolicy validates and compiles a policy. The name is part of every
// Redis key of the policy: 1 to 128 bytes, without ':', '{', '}' or
// whitespace; else the error wraps ErrInvalidPolicy. Limits: 1 to 16, each
// valid as documented on Limit, no two of the same Algorithm and Period;
// else the error wraps ErrInvalidLimit. A policy of another's name with
// other limits redefines the name in a Limiter from its first use there
// (docs/operations.md, "Limits changed while running").
func NewPolicy(name string, limits ...Limit) (*Policy, error) {
	rl := make([]remote.Limit, len(limits))
	for i, l := range limits {
		if l.Algorithm < TokenBucket || l.Algorithm > CalendarWindow {
			return nil, fmt.Errorf("%w: policy %q: limit %d: unknown algorithm %d (TokenBucket to CalendarWindow: %d to %d)",
				ErrInvalidLimit, name, i, int(l.Algorithm), int(TokenBucket), int(CalendarWindow))
		}
		if _, ok := calendarUnits[l.Calendar.Unit]; !ok && l.Calendar.Unit != "" {
			return nil, fmt.Errorf("%w: policy %q: limit %d: unknown calendar unit %q (day, week or month)",
				ErrInvalidLimit, name, i, l.Calendar.Unit)
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

// Capacity returns the most units one request can be admitted: the
// smallest Burst (Rate for windows) of its limits; 0 for a zero Policy.
func (p *Policy) Capacity() int {
	if p.compiled == nil {
		return 0
	}
	return int(p.compiled.Capacity())
}

// Worldwide returns p with limits that hold across every region of
// Limiters made WithGlobal (docs/regions.md); its decisions name its
// tightest limit. Elsewhere, or with a log or leaky bucket, it is refused
// with ErrInvalidPolicy, as a zero Policy is (returned as it is).
func (p *Policy) Worldwide() *Policy {
	if p.compiled == nil || p.compiled.Global() != nil {
		return p
	}
	w := *p
	w.compiled, w.tight = p.compiled.Pooled(), p.compiled.Tightest()
	return &w
}

// limit returns the limit of index i in a decision on p.
func (p *Policy) limit(i int) Limit {
	if p.compiled.Global() != nil {
		return p.limits[p.tight]
	}
	return p.limits[i]
}

// Shadow returns a policy with p's name, limits and state in shadow mode,
// to roll a limit out safely: its decisions are made and counted as p's,
// but a would-be denial (a block included) is admitted with
// Result.Shadowed set, charging nothing, and counted in
// PolicyStats.ShadowDenied. WaitN under it never waits.
func (p *Policy) Shadow() *Policy {
	if p.shadow {
		return p
	}
	s := *p
	s.shadow = true
	return &s
}
