package remote

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"weak"

	"github.com/redis/go-redis/v9"
)

// DialWatcher is told of the dials of a Store's client that fail while it
// watches them (Store.Watch): a refused connection, a name that does not
// resolve, a TLS handshake that fails. go-redis dials on a goroutine of its
// own, with a context of its own, and retries a failed dial with a
// backoff, while the call that needs the connection waits until its
// deadline and ends with its context's error; told at once, the call's
// owner can end the call then, with the dial's error as its cause.
type DialWatcher interface {
	// DialFailed is given the address dialed and the dial's error, which
	// names it. It runs on the dialing goroutine, holding the lock of the
	// client's watchers: it must not block, or call Watch or Unwatch.
	DialFailed(addr string, err error)
}

// dialHook tells the watchers of a client's Stores of its failed dials. A
// client gets one (watchDials), shared by all its nodes, and it changes
// nothing else: dials, commands and pipelines go past it unchanged.
type dialHook struct {
	mu       sync.Mutex
	watchers map[DialWatcher]struct{} // requires mu held
}

var _ redis.Hook = (*dialHook)(nil)

func (h *dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		// A dial abandoned (its context ended) says nothing of the server.
		if err != nil && ctx.Err() == nil {
			err := named(addr, err)
			h.mu.Lock()
			for w := range h.watchers {
				w.DialFailed(addr, err)
			}
			h.mu.Unlock()
		}
		return conn, err
	}
}

func (*dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Watch has w told of each dial of the Store's client that fails, until
// Unwatch(w). With a client that is not a Client or a ClusterClient it
// does nothing.
func (s *Store) Watch(w DialWatcher) {
	if h := s.dials; h != nil {
		h.mu.Lock()
		h.watchers[w] = struct{}{}
		h.mu.Unlock()
	}
}

// Unwatch ends Watch(w).
func (s *Store) Unwatch(w DialWatcher) {
	if h := s.dials; h != nil {
		h.mu.Lock()
		delete(h.watchers, w)
		h.mu.Unlock()
	}
}

// hooked holds the dialHook of each client given one, by a weak pointer
// to the client: each gets one however many Stores are made on it, and
// none is kept alive by being here.
var hooked sync.Map

// watchDials returns client's dialHook, adding it to client the first
// time: to a Client itself, and to each node a ClusterClient makes (as it
// learns the cluster's layout, from its first call on). Others (a Ring,
// whose shards come and go by themselves) get none: nil.
func watchDials(client redis.UniversalClient) *dialHook {
	switch c := client.(type) {
	case *redis.Client:
		return hookOf(c, func(h *dialHook) { c.AddHook(h) })
	case *redis.ClusterClient:
		return hookOf(c, func(h *dialHook) { c.OnNewNode(func(n *redis.Client) { n.AddHook(h) }) })
	}
	return nil
}

// hookOf returns c's dialHook, making it and calling add with it the first
// time.
func hookOf[T any](c *T, add func(*dialHook)) *dialHook {
	key := weak.Make(c)
	if h, ok := hooked.Load(key); ok {
		return h.(*dialHook)
	}
	h := &dialHook{watchers: map[DialWatcher]struct{}{}}
	if old, loaded := hooked.LoadOrStore(key, h); loaded {
		return old.(*dialHook)
	}
	runtime.AddCleanup(c, func(key weak.Pointer[T]) { hooked.Delete(key) }, key)
	add(h)
	return h
}

// addrError is an error of the Redis server at addr, or of reaching it.
type addrError struct {
	addr string
	err  error
}

// Error names the address once: a dial's error names it already.
func (e *addrError) Error() string {
	msg := e.err.Error()
	if strings.Contains(msg, e.addr) {
		return msg
	}
	return e.addr + ": " + msg
}

func (e *addrError) Unwrap() error { return e.err }

// named returns err naming the server at addr: nil for nil, err itself
// when addr is "" or err names a server already; Redis's protocol error
// to a client that has not authenticated, as the NOAUTH it is.
func named(addr string, err error) error {
	if err == nil {
		return nil
	}
	if redis.HasErrorPrefix(err, unauthenticatedPrefix) {
		err = &unauthenticated{err}
	}
	var ae *addrError
	if addr == "" || errors.As(err, &ae) {
		return err
	}
	return &addrError{addr, err}
}

// Addr returns the address of the server that holds key's state under p,
// for naming it in errors: a Client's own (but a failover client's, which
// moves with the master), with a ClusterClient the master's (see Node),
// else "" (and with a nil p). It makes no call: a ClusterClient names no
// master before Node has loaded the cluster's layout.
func (s *Store) Addr(p *Policy, key string) string {
	switch c := s.client.(type) {
	case *redis.Client:
		if addr := c.Options().Addr; addr != failoverAddr {
			return addr
		}
	case *redis.ClusterClient:
		if p == nil || !s.layout.Load() {
			return ""
		}
		// The layout is loaded: the lookup makes no call. (Loading it with
		// an ended context would fail, and have the client forget the
		// nodes it had found.)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return s.Node(ctx, p, key)
	}
	return ""
}

// failoverAddr is the Addr of a failover client's options (go-redis's
// NewFailoverClient): not an address.
const failoverAddr = "FailoverClient"

// unauthenticatedPrefix begins Redis's reply to a command longer than a
// client that has not authenticated may send (more than 10 arguments, as
// every script call of ours has): "ERR Protocol error: unauthenticated
// multibulk length" (or "bulk length"), after which Redis closes the
// connection. (redis.HasErrorPrefix reads past the reply's "ERR ".)
const unauthenticatedPrefix = "Protocol error: unauthenticated"

// unauthenticated is that reply said as the NOAUTH it is, as PING's reply
// says it: its cause is a missing password, not the protocol. It is a
// redis.Error (Refused), and unwraps to Redis's reply.
type unauthenticated struct{ err error }

func (e *unauthenticated) Error() string {
	return "NOAUTH Authentication required (" + e.err.Error() + ")"
}

// RedisError makes e a redis.Error: Redis's own reply.
func (e *unauthenticated) RedisError() {}

func (e *unauthenticated) Unwrap() error { return e.err }
