package remote_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// client returns a go-redis client made with o, closed when t ends.
func client(t *testing.T, o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A pipeline whose connection fails with Redis's own reply to the AUTH or
// HELLO that opens it (WRONGPASS) gives each of its calls that reply,
// naming the server: go-redis leaves them with neither reply nor error,
// which read "redis: unexpected type=<nil> for Slice". A single call and
// Ping say the same. A client with no password for a Redis that wants one
// (NOAUTH) is cut off at its first script call, which has too many
// arguments for an unauthenticated client: each call of the pipeline gets
// that protocol error said as the NOAUTH it is (not the EOF of the calls
// after it, nor "ERR Protocol error: unauthenticated multibulk length"
// alone), as Ping does.
func TestBatchGivesEachCallTheConnectionsError(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	locked := redistest.Start(t) // every connection must authenticate
	if err := locked.Client(t).ConfigSet(ctx, "requirepass", "pw").Err(); err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, "p", tb(10, 10, time.Second))
	for _, c := range []struct {
		name, addr, reply, ping string
		client                  *redis.Client
	}{
		{"WRONGPASS", srv.Addr, "WRONGPASS", "WRONGPASS", client(t, &redis.Options{Addr: srv.Addr, Username: "limited", Password: "wrong"})},
		{"NOAUTH", locked.Addr, "NOAUTH", "NOAUTH", client(t, &redis.Options{Addr: locked.Addr})},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := remote.NewStore(c.client, "test")
			check := func(what string, err error) {
				t.Helper()
				reply := c.reply
				if what == "Ping" {
					reply = c.ping
				}
				var re redis.Error
				if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), c.addr+": "+reply) {
					t.Errorf("%s: %v; want Redis's %s reply, naming %s", what, err, reply, c.addr)
				}
			}
			_, errs, gerrs := s.Batch(ctx,
				[]remote.Request{{Policy: p, Key: "a", Min: 1, Max: 1}, {Policy: p, Key: "b", Min: 1, Max: 5}},
				[]remote.Grant{{Policy: p, Key: "c", Units: 1, At: 1}})
			for i, err := range errs {
				check("Batch's acquire "+string(rune('0'+i)), err)
			}
			check("Batch's refund", gerrs[0])
			_, err := s.Acquire(ctx, remote.Request{Policy: p, Key: "a", Min: 1, Max: 1})
			check("Acquire", err)
			check("Ping", s.Ping(ctx))
		})
	}
}

// A user who may not run scripts fails Ping with NOPERM, as every call
// would, and each error names the server; a user who may passes.
func TestPingNeedsScripts(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "+@all", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	s := remote.NewStore(client(t, &redis.Options{Addr: srv.Addr, Username: "noscripts", Password: "pw"}), "test")
	p := mustPolicy(t, "p", tb(10, 10, time.Second))
	_, err := s.Acquire(ctx, remote.Request{Policy: p, Key: "a", Min: 1, Max: 1})
	for what, err := range map[string]error{"Ping": s.Ping(ctx), "Acquire": err} {
		var re redis.Error
		if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), srv.Addr+": NOPERM") {
			t.Errorf("%s: %v; want NOPERM naming %s", what, err, srv.Addr)
		}
	}
	if err := remote.NewStore(admin, "test").Ping(ctx); err != nil {
		t.Fatalf("Ping as a user who may run scripts: %v", err)
	}
}

// watcher records the failed dials it is told of.
type watcher struct {
	mu    sync.Mutex
	addrs []string
	errs  []error
}

func (w *watcher) DialFailed(addr string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addrs = append(w.addrs, addr)
	w.errs = append(w.errs, err)
}

func (w *watcher) heard() ([]string, []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addrs, w.errs
}

// A Store's watchers are told of each failed dial of its client, named,
// by a hook the client gets once, whatever the Stores made on it: a
// refused connection, a name that does not resolve (by a resolver that
// sends nothing: no DNS query leaves the machine), a TLS handshake with a
// server that does not speak TLS. After Unwatch, nothing.
func TestWatchHearsFailedDials(t *testing.T) {
	ctx := context.Background()
	refused := redistest.ClosedAddr(t)
	tlsAddr := redistest.NotTLS(t)
	for _, c := range []struct {
		name, addr string
		opts       redis.Options
		is         func(error) bool
	}{
		{"refused", refused, redis.Options{}, func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }},
		{"dns", "redis.invalid:7000", redis.Options{Dialer: redistest.NoDNS}, func(err error) bool {
			var de *net.DNSError
			return errors.As(err, &de) && de.Name == "redis.invalid"
		}},
		{"tls", tlsAddr, redis.Options{TLSConfig: tlsConfig()}, func(err error) bool { return strings.Contains(err.Error(), "tls: ") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Addr = c.addr
			cl := client(t, &c.opts)
			s, other := remote.NewStore(cl, "test"), remote.NewStore(cl, "other")
			w, wo := &watcher{}, &watcher{}
			s.Watch(w)
			other.Watch(wo)
			defer other.Unwatch(wo)
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := s.Ping(cctx)
			cancel()
			if err == nil {
				t.Fatal("Ping succeeded")
			}
			s.Unwatch(w)
			addrs, errs := w.heard()
			if len(errs) == 0 {
				t.Fatalf("no failed dial heard; Ping said %v", err)
			}
			if addrs[0] != c.addr || !c.is(errs[0]) || !strings.Contains(errs[0].Error(), c.addr) {
				t.Fatalf("heard %q: %v; want the failure, naming %s", addrs[0], errs[0], c.addr)
			}
			if _, errs := wo.heard(); len(errs) == 0 {
				t.Fatal("a Store on the same client heard nothing: one hook for both")
			}
			n := len(errs)
			cctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
			_ = s.Ping(cctx)
			cancel()
			if _, errs := w.heard(); len(errs) != n {
				t.Fatalf("heard %d failures after Unwatch", len(errs)-n)
			}
		})
	}
}

// tlsConfig is a client's TLS configuration.
func tlsConfig() *tls.Config {
	return &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}
}
