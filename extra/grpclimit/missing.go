package grpclimit

import "errors"

// ErrMissingKey is the error a call gets, under DenyMissingKey, when a
// dimension has no key for it (codes.Unauthenticated with the default
// error handler).
var ErrMissingKey = errors.New("grpclimit: no key for the call")

// MissingKey is what a dimension does with a call its KeyFunc gives no key
// for (an anonymous call under a per-API-key policy, say): see
// WithMissingKey. The choices and their names are httplimit's.
type MissingKey struct {
	deny     bool
	fallback string
}

// key returns the key to use for a call whose KeyFunc gave key: key
// itself, or for an empty one the fallback ("" when none: the call is
// not limited there), or deny when m refuses it.
func (m MissingKey) key(key string) (k string, deny bool) {
	if key != "" {
		return key, false
	}
	return m.fallback, m.deny
}

var (
	// DenyMissingKey refuses the call before any dimension decides it: the
	// error handler gets ErrMissingKey (codes.Unauthenticated by default,
	// which UnaryClientInterceptor does not retry: the call would fail
	// again). The safe choice for a service whose every client must be
	// limited.
	DenyMissingKey = MissingKey{deny: true}
	// PassMissingKey lets the call through, not limited by the dimension
	// (other dimensions still apply). The default.
	PassMissingKey = MissingKey{}
)

// FallbackKey limits every call without a key under the dimension by one
// key shared by all of them: anonymous clients share one budget, and are
// denied as any key is (codes.ResourceExhausted). FallbackKey("") is
// PassMissingKey; a key longer than ratelease.MaxKeyLen is
// ErrInvalidOption from New.
func FallbackKey(key string) MissingKey { return MissingKey{fallback: key} }

// WithMissingKey sets what every dimension (the Interceptor's own policy,
// a WithMethod policy, each WithDimension) does with a call its KeyFunc
// gives no key for: DenyMissingKey, FallbackKey(k), or PassMissingKey
// (the default, and how an Interceptor without this option has always
// treated such a call).
//
// Keys are read, and missing ones handled, before any dimension decides,
// so a refusal charges nothing. An error handler (WithErrorHandler) that
// returns nil for ErrMissingKey lets the call go on to its handler
// undecided by every dimension.
func WithMissingKey(m MissingKey) Option { return optionFunc(func(c *config) { c.missing = m }) }
