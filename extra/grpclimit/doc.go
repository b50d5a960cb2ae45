// Package grpclimit is gRPC middleware for ratelease, the gRPC twin of
// httplimit: server interceptors that limit each call under one or more
// policies, keyed by client IP, incoming metadata, the method, or any
// function of the call, and a client interceptor that waits as long as the
// server says before retrying a denied call.
//
//	lim, err := grpclimit.New(limiter, perIP,
//		grpclimit.WithMethod("/shop.Orders/Export", exports),
//		grpclimit.WithDimension(perKey, grpclimit.Metadata("x-api-key")))
//	srv := grpc.NewServer(lim.ServerOptions()...)
//
// It has httplimit's vocabulary and behaviour: a policy of the
// Interceptor's own (per method with WithMethod, the default otherwise),
// further dimensions (WithDimension) that must all admit a call, the units
// of earlier dimensions refunded when a later one denies (Limiter.Refund),
// a cost per call (WithCost), the same rate-limit fields with the same
// values (WithHeaders: ratelimit-policy, ratelimit, x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-reset), denied and error handlers,
// and options checked once, by New, with sentinel errors (ErrNoLimiter,
// ErrNoPolicy, ErrInvalidOption).
//
// A call that a dimension's KeyFunc gives no key for (an anonymous call
// under a per-API-key policy) is what WithMissingKey says, with
// httplimit's choices: DenyMissingKey refuses it (codes.Unauthenticated
// with the default error handler), the safe choice when every client must
// be limited; FallbackKey("anonymous") limits every such call under one
// shared key; PassMissingKey, the default, leaves it out of that policy.
//
// An admitted call gets the fields in its header metadata. A denied call
// fails with codes.ResourceExhausted: its status carries an
// errdetails.RetryInfo, whose delay is the Result's RetryAfter, and an
// errdetails.QuotaFailure naming the policy and limit; it is a
// Trailers-Only response, whose trailer metadata carry the fields,
// retry-after (in seconds) and grpc-retry-pushback-ms, which gRPC's own
// retry policy (a service config's retryPolicy with RESOURCE_EXHAUSTED
// among its retryableStatusCodes) honours. UnaryClientInterceptor honours
// RetryInfo without a service config, within a number of retries and a
// total wait; RetryDelay reads the hint for any other client.
//
// A stream is one call: it is decided and charged when it opens. Deciding
// is the Limiter's, including what happens while Redis is down (its
// FailureMode): with FailLocal and FailOpen calls are still decided, with
// FailClosed they fail with codes.Unavailable. The package imports gRPC,
// the errdetails protos and ratelease's public API, nothing else of it:
// the root package, and httplimit, whose exported parts compute the
// rate-limit fields (HeaderStyle.Fields), find the client behind trusted
// proxies (ClientAddr, IPKey) and refund earlier dimensions (Refund), so
// that the two packages answer alike from one implementation.
// An Interceptor is safe for concurrent use.
package grpclimit
