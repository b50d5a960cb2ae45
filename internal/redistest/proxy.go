package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one server, for fault
// tests: it can delay every reply, drop every byte (a black hole: the
// connections stay open and nothing arrives), and cut every connection. It
// is stopped, with all its connections, when the test that made it ends.
type Proxy struct {
	// Addr is the proxy's host:port; point the client here.
	Addr   string
	target string
	ln     net.Listener
	delay  atomic.Int64
	drop   atomic.Bool
	refuse atomic.Pointer[[]byte]

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port on this machine).
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	return p
}

// SetDelay delays every reply from the server by d from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// SetDrop makes the proxy discard every byte, both ways, while on.
func (p *Proxy) SetDrop(on bool) { p.drop.Store(on) }

// Refuse makes the proxy close a connection, instead of passing it on,
// when a request on it holds the bytes b, matched without regard to case
// (nil: never): as a proxy that does not know a command does (twemproxy).
// A command's name is matched as it travels, "\r\nfcall\r\n".
func (p *Proxy) Refuse(b []byte) {
	if b == nil {
		p.refuse.Store(nil)
		return
	}
	low := bytes.ToLower(b)
	p.refuse.Store(&low)
}

// Cut closes every connection made so far; clients must reconnect.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c, false) // client to server, unless refused
		go p.pipe(c, s, true)  // server to client, delayed
	}
}

func (p *Proxy) pipe(dst, src net.Conn, delayed bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if r := p.refuse.Load(); !delayed && r != nil && bytes.Contains(bytes.ToLower(buf[:n]), *r) {
			return
		}
		if n > 0 && !p.drop.Load() {
			if d := time.Duration(p.delay.Load()); delayed && d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
