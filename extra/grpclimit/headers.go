package grpclimit

import (
	"google.golang.org/grpc/metadata"

	"github.com/ratelease/ratelease/httplimit"
)

// HeaderStyle is a set of rate-limit metadata styles: the fields of
// httplimit's headers, sent as gRPC response metadata (an admitted call's
// header metadata, a denied call's trailer metadata: see WithHeaders),
// with the same names in lowercase and the same values.
type HeaderStyle uint8

// The header styles. Combine them with |.
const (
	// DraftHeaders are ratelimit-policy and ratelimit, the fields of
	// draft-ietf-httpapi-ratelimit-headers-11, as httplimit sends them.
	// ratelimit-policy lists every limit of every dimension that applies
	// to the call (the same on every response to one client, denials
	// included), as `"name";q=quota;w=window-seconds`; ratelimit has one
	// member per dimension decided, for its deciding limit, as
	// `"name";r=remaining;t=seconds`, t being the seconds until more quota
	// is made available: on a denial, retry-after; when admitted, until the
	// next unit comes back (0 at full quota; for a fixed window, its end;
	// for the sliding algorithms an estimate, as if their units came back
	// evenly). A policy with one limit is named by its name; a limit of a
	// policy with several is named by the policy's name and its period
	// ("api-1s", "api-1m").
	DraftHeaders HeaderStyle = 1 << iota
	// XRateLimitHeaders are x-ratelimit-limit (the deciding limit's Rate),
	// x-ratelimit-remaining and x-ratelimit-reset (in Unix seconds: when
	// the limit is fully replenished, and on a denial when retry-after
	// ends), for the most restrictive dimension.
	XRateLimitHeaders

	// NoHeaders sends no rate-limit metadata (a denial still carries
	// retry-after, grpc-retry-pushback-ms and its status details).
	NoHeaders HeaderStyle = 0
	// AllHeaders sends every style; the default.
	AllHeaders = DraftHeaders | XRateLimitHeaders
)

// The metadata keys, lowercase as gRPC requires.
const (
	mdPolicy     = "ratelimit-policy"
	mdRateLimit  = "ratelimit"
	mdLimit      = "x-ratelimit-limit"
	mdRemaining  = "x-ratelimit-remaining"
	mdReset      = "x-ratelimit-reset"
	mdRetryAfter = "retry-after"
	// mdPushback is the trailer by which a server tells gRPC's own retry
	// policy (a service config's retryPolicy) when to retry, in
	// milliseconds (gRFC A6).
	mdPushback = "grpc-retry-pushback-ms"
)

// http returns the httplimit styles of s: the same styles, which give the
// fields their values.
func (s HeaderStyle) http() httplimit.HeaderStyle {
	var h httplimit.HeaderStyle
	if s&DraftHeaders != 0 {
		h |= httplimit.DraftHeaders
	}
	if s&XRateLimitHeaders != 0 {
		h |= httplimit.XRateLimitHeaders
	}
	return h
}

// write adds the fields f of styles s to md, under their metadata keys.
func (s HeaderStyle) write(md metadata.MD, f *httplimit.Fields) {
	if s&DraftHeaders != 0 {
		md[mdPolicy] = []string{f.Policy}
		md[mdRateLimit] = []string{f.RateLimit}
	}
	if s&XRateLimitHeaders != 0 {
		md[mdLimit] = []string{f.Limit}
		md[mdRemaining] = []string{f.Remaining}
		md[mdReset] = []string{f.Reset}
	}
}
