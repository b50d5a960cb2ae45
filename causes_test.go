package ratelease_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// cause is one way for a Limiter to fail to reach Redis, and what its
// errors must say of it.
type cause struct {
	name string
	opts redis.Options
	// says is what the error says after the server's address: Redis's
	// reply, or the client's error; pingSays what Ping's says, when it
	// differs.
	says, pingSays string
	// is finds the underlying cause in the error (errors.Is or As).
	is func(error) bool
}

// isReply reports whether err holds Redis's reply starting with prefix.
func isReply(prefix string) func(error) bool {
	return func(err error) bool {
		var re redis.Error
		return errors.As(err, &re) && strings.HasPrefix(re.Error(), prefix)
	}
}

// causes returns the causes tests can produce here: a port nothing
// listens on; a name that does not resolve (by a resolver that sends no
// query: nothing leaves the machine); a wrong password (WRONGPASS); no
// password for a Redis that wants one (NOAUTH: the scripts, too long for
// a client that has not authenticated, get Redis's protocol error for it,
// which is said as the NOAUTH it is, as PING's reply says); a user who may not run scripts (NOPERM); TLS to a server that
// does not speak it. Each server is started for t, on 127.0.0.1.
func causes(t *testing.T) []cause {
	t.Helper()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	for _, acl := range [][]any{
		{"ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all"},
		{"ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "+@all", "-@scripting"},
	} {
		if err := admin.Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	locked := redistest.Start(t)
	if err := locked.Client(t).ConfigSet(ctx, "requirepass", "pw").Err(); err != nil {
		t.Fatal(err)
	}
	return []cause{
		{"refused", redis.Options{Addr: redistest.ClosedAddr(t)}, "dial tcp ", "", func(err error) bool {
			return errors.Is(err, syscall.ECONNREFUSED)
		}},
		{"dns", redis.Options{Addr: "redis.invalid:7000", Dialer: redistest.NoDNS}, "dial tcp: lookup redis.invalid", "", func(err error) bool {
			var de *net.DNSError
			return errors.As(err, &de) && de.Name == "redis.invalid"
		}},
		{"wrongpass", redis.Options{Addr: srv.Addr, Username: "limited", Password: "wrong"}, "WRONGPASS", "", isReply("WRONGPASS")},
		{"noauth", redis.Options{Addr: locked.Addr}, "NOAUTH", "", isReply("NOAUTH")},
		{"noperm", redis.Options{Addr: srv.Addr, Username: "noscripts", Password: "pw"}, "NOPERM", "", isReply("NOPERM")},
		{"tls", redis.Options{Addr: redistest.NotTLS(t), TLSConfig: &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}},
			"tls: ", "", func(err error) bool {
				var rh tls.RecordHeaderError
				return errors.As(err, &rh)
			}},
	}
}

// Each cause reaches Allow's error (FailClosed), Ping's and the first
// failure's event, in lease mode and in exact mode: wrapping
// ErrUnavailable, the underlying cause found with errors.Is or As, saying
// it after the server's address. None of the first five requests waits
// for the Redis timeout (the fifth failure opens the breaker), and Ping
// does not either: a dial refused, a name not resolved, a handshake
// failed and a reply of Redis's come back at once.
func TestCausesNamed(t *testing.T) {
	const timeout = 2 * time.Second
	p, err := ratelease.NewPolicy("p", ratelease.PerSecond(10))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range causes(t) {
		for _, mode := range []string{"lease", "exact"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				ctx := context.Background()
				opts := c.opts
				client := redis.NewClient(&opts)
				defer client.Close()
				log := &eventLog{}
				o := []ratelease.Option{ratelease.WithFailureMode(ratelease.FailClosed),
					ratelease.WithRedisTimeout(timeout), ratelease.WithEvents(log.event)}
				if mode == "exact" {
					o = append(o, ratelease.WithExact())
				}
				l, err := ratelease.New(client, o...)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				check := func(what string, err error) {
					t.Helper()
					says := c.says
					if what == "Ping" && c.pingSays != "" {
						says = c.pingSays
					}
					if strings.HasPrefix(says, "dial tcp ") { // the dial names the address itself
						says += opts.Addr
					} else {
						says = opts.Addr + ": " + says
					}
					if !errors.Is(err, ratelease.ErrUnavailable) || !c.is(err) || !strings.Contains(err.Error(), says) {
						t.Errorf("%s: %v; want ErrUnavailable, and the cause saying %q", what, err, says)
					}
				}
				for i := range 5 {
					start := time.Now()
					_, err := l.Allow(ctx, p, "k")
					if took := time.Since(start); took > timeout/4 {
						t.Errorf("Allow %d took %v: it waited for the timeout", i, took)
					}
					check("Allow", err)
				}
				_, err = l.Allow(ctx, p, "k")
				if !strings.Contains(fmtErr(err), "circuit breaker open") {
					t.Errorf("Allow after five failures: %v; want the breaker open", err)
				}
				check("Allow with the breaker open", err)
				start := time.Now()
				err = l.Ping(ctx)
				if took := time.Since(start); took > timeout/4 {
					t.Errorf("Ping took %v: it waited for the timeout", took)
				}
				check("Ping", err)
				evs := log.take()
				if len(evs) < 2 || evs[0].Kind != ratelease.EventFirstFailure || evs[1].Kind != ratelease.EventBreaker {
					t.Fatalf("events %s: want the first failure, then the breaker's opening", kinds(evs))
				}
				check("the first failure's event", evs[0].Err)
				check("the breaker's opening", evs[1].Err)
				t.Logf("%v", evs[0].Err)
			})
		}
	}
}

// fmtErr is err's message, "" for nil.
func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The advice for a go-redis client of the version this module pins, whose
// own commands should say at once why a dial failed: with DialerRetries: 1
// and MaxRetries: -1 a refused dial comes back at once as "connect:
// connection refused", call after call. Either alone does not: go-redis
// dials on a goroutine of its own, retrying the dial DialerRetries times
// (5 by default) 100ms apart, and retries the command MaxRetries times (3
// by default) after a failed dial, with a backoff; a call with a 100ms
// deadline ends first, as "context deadline exceeded". (A Limiter does not
// need it: it ends its own calls when their dial fails; see
// TestCausesNamed.)
func TestClientFailsFastWithoutDialRetries(t *testing.T) {
	run := func(o redis.Options) (worst time.Duration, last error) {
		o.Addr = redistest.ClosedAddr(t)
		o.PoolSize = 100 // the pool stops dialing after PoolSize failed dials
		c := redis.NewClient(&o)
		defer c.Close()
		for range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			start := time.Now()
			last = c.Ping(ctx).Err()
			worst = max(worst, time.Since(start))
			cancel()
		}
		return worst, last
	}
	worst, last := run(redis.Options{DialerRetries: 1, MaxRetries: -1})
	if !errors.Is(last, syscall.ECONNREFUSED) || worst > 50*time.Millisecond {
		t.Fatalf("DialerRetries: 1, MaxRetries: -1: %v, slowest %v; want the refusal at once", last, worst)
	}
	for _, o := range []redis.Options{{}, {MaxRetries: -1}} {
		if worst, last := run(o); errors.Is(last, syscall.ECONNREFUSED) && worst < 50*time.Millisecond {
			t.Fatalf("MaxRetries %d: the refusal at once (%v): the advice may be simpler now", o.MaxRetries, worst)
		}
	}
}
