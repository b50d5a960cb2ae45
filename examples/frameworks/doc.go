// Package frameworks shows ratelease's HTTP middleware, httplimit, in the
// three most used Go web frameworks. It is a module of its own, so that
// the frameworks never enter the main go.mod; its examples and tests run
// with
//
//	cd examples/frameworks && go test -race -v .
//
// httplimit.New returns a func(http.Handler) http.Handler, the standard
// library's middleware shape. Each framework takes it in one line:
//
//	r.Use(mw)                      // chi: its middleware is that shape already
//	e.Use(echo.WrapMiddleware(mw)) // echo
//	router.Use(frameworks.Gin(mw)) // gin: Gin, in this package (copy it)
//
// and per group or per route as well: chi's r.With(mw) and r.Group, echo's
// e.Group("/api", echo.WrapMiddleware(mw)) and route middleware, gin's
// router.Group("/api", frameworks.Gin(mw)) and route handlers. Every
// response gets the rate-limit headers; a denied request gets 429 with
// Retry-After, and the handlers after the middleware do not run (in gin,
// the request is aborted: c.IsAborted() is true, and the gin middleware
// before it sees the 429 in c.Writer.Status()).
//
// The middleware keys requests by the connection's address (RemoteAddr)
// unless told otherwise. Behind a load balancer, give httplimit.ClientIP
// the balancer's prefixes, and do not rewrite RemoteAddr from request
// headers before the middleware (chi's deprecated middleware.RealIP does
// so, trusting anyone's X-Forwarded-For): any client could then choose its
// own key. gin's c.ClientIP() and echo's c.RealIP() are not used: the
// middleware sees only the *http.Request.
//
// The examples run a Limiter on miniredis, an in-memory Redis, with its
// clock stopped so that their output is the same on every run; use your
// Redis instead.
package frameworks
