// Package httplimit is net/http middleware for ratelease: it limits each
// request under one or more policies, keyed by client IP, a header, or any
// function of the request, and tells the client where it stands in
// rate-limit headers.
//
//	mw := httplimit.Middleware(limiter, perIP)
//	http.ListenAndServe(addr, mw(mux))
//
// Every response carries, by default, the headers of
// draft-ietf-httpapi-ratelimit-headers-11 (RateLimit-Policy and RateLimit)
// and the common X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset; a denied request gets 429 Too Many Requests with
// Retry-After. WithHeaders picks the styles.
//
// Client IPs come from the connection's RemoteAddr. X-Forwarded-For and
// X-Real-IP are read only when the connection comes from a proxy you
// trust (ClientIP's arguments): anyone can send those headers, so trusting
// them by default would let every client pick its own key.
//
// The parts of the middleware that do not depend on net/http are exported
// for code that limits the requests of another protocol as the middleware
// does (extra/grpclimit is built on them): NewDimension describes a policy
// for the rate-limit fields, once; HeaderStyle.Fields computes the fields'
// values from the Decisions made for a request (Tightest picks the one that
// fills the X-RateLimit fields, Refund gives back what earlier dimensions
// charged when a later one denies); ClientAddr finds the client behind
// trusted proxies from the peer's address and a lookup of the request's
// headers, and IPKey keys it as ClientIP does.
//
// The package owns the HTTP side only: keys, costs, status codes and
// headers. Deciding is the Limiter's, including what happens while Redis
// is down (its FailureMode): with FailLocal and FailOpen requests are still
// decided, with FailClosed they get 503. It imports net/http and the root
// package's public API, nothing else.
package httplimit
