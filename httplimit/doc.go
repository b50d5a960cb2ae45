// Package httplimit is net/http middleware for ratelease: it limits each
// request under one or more policies, keyed by client IP, a header, or any
// function of the request, and tells the client where it stands in
// rate-limit headers.
//
//	perIP, _ := ratelease.NewPolicy("ip", ratelease.PerSecond(20))
//	perKey, _ := ratelease.NewPolicy("key", ratelease.PerSecond(10), ratelease.PerHour(1000))
//
//	mw, err := httplimit.New(limiter, perIP,
//		httplimit.WithKey(httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))), // behind your proxies
//		httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")))
//	if err != nil {
//		log.Fatal(err) // a nil Limiter or policy: ErrNoLimiter, ErrNoPolicy
//	}
//	http.ListenAndServe(addr, mw(mux))
//
// Middleware is the same without the error, for a configuration known to
// be right: a nil Limiter or policy is logged once where it is built, and
// every request then gets the error handler.
//
// InFlight limits requests in flight instead of their rate: it holds a
// permit of a ratelease.Concurrency while the handler serves each request
// (at most its limit of a key at once, across every instance), and answers
// 429 ("too many requests in flight") when none is free, with a
// Retry-After from how long its permits were held, at most until the first
// permit held expires.
//
// The package owns the HTTP side only: keys, costs, status codes and
// headers. Deciding is the Limiter's, including what happens while Redis
// is down (its FailureMode): with FailLocal and FailOpen requests are still
// decided, with FailClosed they get 503. It imports net/http and the root
// package's public API, nothing else.
//
// # Keys
//
// ClientIP() keys by the connection's address (RemoteAddr; an IPv6 client
// by its /64). It reads X-Forwarded-For (the rightmost address that is not
// one of your proxies) or X-Real-IP only when the connection comes from a
// proxy you name as its arguments: by default those headers are ignored,
// since anyone can send them, and trusting them would let every client pick
// its own key. Header(name) keys by a header; any func(*http.Request)
// string will do (a KeyFunc). A request a KeyFunc gives no key for (an
// anonymous request under a per-API-key limit) is what WithMissingKey
// says: DenyMissingKey refuses it (401 with the default error handler),
// the safe choice when every client must be limited;
// FallbackKey("anonymous") limits every such request under one shared
// key; PassMissingKey, the default, leaves it out of that policy.
//
// Do not rewrite RemoteAddr from request headers before the middleware
// (chi's deprecated middleware.RealIP does, trusting any client's
// X-Forwarded-For): every client could then pick its own key. gin's
// c.ClientIP() and echo's c.RealIP() play no part: the middleware sees only
// the *http.Request.
//
// # Dimensions
//
// WithDimension adds a policy with its own key. Every dimension that
// applies must admit; the most restrictive one fills the X-RateLimit
// headers. They are asked in order and the first denial (or error) ends
// the request; the units that earlier dimensions charged for it are
// refunded (Limiter.Refund), so a denied request costs no dimension
// anything, whatever their order. WithCost charges a request several units
// (a GraphQL query's complexity, say).
//
// A policy in shadow mode (ratelease.Policy.Shadow) never answers 429: its
// would-be denial is admitted, its headers report what it would decide,
// and a later dimension's denial refunds nothing for it, since it charged
// nothing.
//
// # Headers
//
// Every response carries, by default, the headers of
// draft-ietf-httpapi-ratelimit-headers-11, RateLimit-Policy and RateLimit
// (for example "key-1s";q=10;w=1 and "key-1s";r=7;t=1), and the common
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (Unix
// seconds). RateLimit-Policy names every policy that applies to the
// request, on every response, a 429 included. RateLimit's t is, as the
// draft says, the seconds until more quota is made available: on a 429 what
// Retry-After says; when admitted, until the next unit comes back (a fixed
// window's end; an estimate for the sliding algorithms).
// X-RateLimit-Reset is when the limit is full again, and on a 429 when
// Retry-After ends, so that a client waiting for it waits no longer than it
// must. WithHeaders picks the styles (DraftHeaders, XRateLimitHeaders,
// AllHeaders, NoHeaders). A 429 always has Retry-After.
//
// # Denials and errors
//
// A denied request gets 429 Too Many Requests with a one-line body, or what
// WithDeniedHandler writes (ResultFrom(r.Context()) has the deciding
// ratelease.Result). Limiter errors go to WithErrorHandler; the default,
// DefaultErrorHandler, answers 503 for ratelease.ErrUnavailable (Redis down
// with FailClosed) and ratelease.ErrClosed, 401 for ErrMissingKey, 400 for a key over
// ratelease.MaxKeyLen or a cost no limit can admit, nothing when the client
// has gone, and 500 otherwise, with the error in the log (a nil Limiter or
// policy, a WithCost function that returned less than 1).
//
// # Choosing keys
//
// Limit by what names who pays for the request: the API key or account for
// an API (their plan sets the limit), the client IP for anonymous traffic
// and for login and sign-up endpoints, where an attacker has no account.
// Several at once is common (per key and per IP, as above); the most
// restrictive decides. Give ClientIP your load balancers' prefixes, so that
// X-Forwarded-For is read from them and from nobody else, and keep an IP
// limit looser than a user's: many people share one address (offices,
// mobile carriers' NAT). Limit by route too when one endpoint is far more
// expensive than the rest, with its own policy or a cost (WithCost).
//
// For WebSockets and other long connections, limit the handshake (the HTTP
// upgrade request) with the middleware, like any request, and the messages
// inside the connection by calling Limiter.Allow per message, keyed by the
// connection's user; Limiter.Wait slows a sender down instead of refusing
// it. At most N open connections is a concurrency limit, not a rate limit:
// count open connections yourself.
//
// To test your own limits, give the handler under test a Limiter from
// package ratetest (exact mode, an in-memory Redis, a clock that moves only
// when the test says) and call it through net/http/httptest, as
// httplimit_test.go does.
//
// # Web frameworks
//
// The middleware has net/http's shape, func(http.Handler) http.Handler, so
// a web framework takes it in one line, per group or route as well:
//
//	r.Use(mw)                      // chi: its middleware has that shape already
//	e.Use(echo.WrapMiddleware(mw)) // echo
//	router.Use(Gin(mw))            // gin: with an adapter
//
// gin has no adapter of its own (gin.WrapH wraps a handler, not
// middleware); this one runs the rest of gin's chain as the middleware's
// next handler, and aborts it when the middleware answers by itself (a
// 429):
//
//	func Gin(mw func(http.Handler) http.Handler) gin.HandlerFunc {
//		return func(c *gin.Context) {
//			next := false
//			mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
//				next = true
//				c.Request = r
//				c.Next()
//			})).ServeHTTP(c.Writer, c.Request)
//			if !next {
//				c.Abort()
//			}
//		}
//	}
//
// All three are tested in examples/frameworks, a module of its own so that
// no framework enters the main go.mod. That module also holds this adapter,
// as frameworks.Gin. Its examples make real requests to an httptest server,
// and its tests check, in exact and lease mode, that the headers reach
// every response, that the handlers after the middleware run for admitted
// requests only (in gin the request is aborted, and an earlier gin
// middleware sees the 429), that groups and routes limit only their own
// paths, and that a chi route limited with r.With can key by its URL
// parameters (chi.URLParam). Run them from the repository root with
//
//	cd examples/frameworks && go test -race -v .
//
// # Other protocols
//
// The parts of the middleware that do not depend on net/http are exported
// for code that limits the requests of another protocol as the middleware
// does (extra/grpclimit is built on them): NewDimension describes a policy
// for the rate-limit fields, once; HeaderStyle.Fields computes the fields'
// values from the Decisions made for a request (Tightest picks the one that
// fills the X-RateLimit fields, Refund gives back what earlier dimensions
// charged when a later one denies); ClientAddr finds the client behind
// trusted proxies from the peer's address and a lookup of the request's
// headers, and IPKey keys it as ClientIP does. See ExampleHeaderStyle_Fields
// and ExampleClientAddr.
//
// examples/httpserver serves a small API with free and pro plans and a
// per-IP limit (go run ./examples/httpserver); its doc comment has curl
// lines to try.
package httplimit
