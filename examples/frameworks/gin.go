package frameworks

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Gin adapts net/http middleware, such as httplimit.New's, to a gin
// handler: the next http.Handler that mw calls runs the rest of gin's
// chain (c.Next), with the request that mw passed on; when mw answers by
// itself (a 429, say) the rest of the chain is aborted (c.Abort), so no
// later handler runs. Headers that mw sets before calling next reach the
// response, since gin writes them with the first byte of the body.
//
// mw must pass on the ResponseWriter it was given (httplimit does): gin's
// chain goes on writing to c.Writer, so a writer that mw wrapped would not
// see the rest of the response. gin has no such adapter of its own
// (gin.WrapH wraps a handler, not middleware).
func Gin(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		next := false
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			next = true
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !next {
			c.Abort()
		}
	}
}
