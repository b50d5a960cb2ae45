package ratelease

import (
	"context"
	"fmt"
	"github.com/ratelease/ratelease/tier"
)

// result converts a decision of the engine on p into a Result.
func (p *Policy) result(d tier.Decision) Result {
	return Result{
		Allowed:    d.Allowed,
		Limit:      p.limits[d.Limit],
		Remaining:  int(d.Remaining),
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
		Source:     d.Source,
		Granted:    int(d.Granted),
	}
}

// checkTarget validates the policy and key of a call.
func checkTarget(p *Policy, key string) error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil policy", ErrInvalidPolicy)
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

var _ = context.Background
