package redistest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
)

// ClosedAddr returns the address of a port on 127.0.0.1 that nothing
// listens on (a listener's, closed): a dial to it is refused at once.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// NoDNS dials with a resolver whose every DNS query fails before it is
// sent (a redis.Options Dialer): a name is looked up in the hosts file
// only, and nothing leaves the machine.
func NoDNS(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Resolver: &net.Resolver{PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no DNS query leaves this test")
		}}}
	return d.DialContext(ctx, network, addr)
}

// NotTLS returns the address of a listener on 127.0.0.1 that answers every
// connection with a Redis error in plain text: a TLS handshake with it
// fails at once. It stops when t ends.
func NotTLS(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("-ERR not a TLS server\r\n"))
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}
