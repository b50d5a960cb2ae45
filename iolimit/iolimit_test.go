package iolimit_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/iolimit"
	"github.com/ratelease/ratelease/ratetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func policy(t testing.TB, name string, limits ...ratelease.Limit) *ratelease.Policy {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hourly is a bucket of 100,000 bytes refilled over an hour: on a clock
// that stands still, what is left of it is exactly what was not charged.
func hourly(t testing.TB) *ratelease.Policy {
	return policy(t, "hourly", ratelease.Limit{Rate: 100_000, Period: time.Hour})
}

// remaining is what Redis has left of key under p (a Peek, exact).
func remaining(t *testing.T, env *ratetest.Env, p *ratelease.Policy, key string) int {
	t.Helper()
	res, err := env.Limiter().Peek(ctx, p, key)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

func TestBadInput(t *testing.T) {
	env := ratetest.New(t)
	l, p := env.Limiter(), hourly(t)
	long := strings.Repeat("k", ratelease.MaxKeyLen+1)
	var nilCtx context.Context // the bad input tested
	for _, c := range []struct {
		name string
		ctx  context.Context
		l    *ratelease.Limiter
		p    *ratelease.Policy
		key  string
		opts []iolimit.Option
		want error
	}{
		{"nil context", nilCtx, l, p, "k", nil, iolimit.ErrNoContext},
		{"nil limiter", ctx, nil, p, "k", nil, iolimit.ErrNoLimiter},
		{"nil policy", ctx, l, nil, "k", nil, iolimit.ErrNoPolicy},
		{"zero policy", ctx, l, &ratelease.Policy{}, "k", nil, iolimit.ErrNoPolicy},
		{"empty key", ctx, l, p, "", nil, ratelease.ErrInvalidKey},
		{"key too long", ctx, l, p, long, nil, ratelease.ErrInvalidKey},
		{"chunk 0", ctx, l, p, "k", []iolimit.Option{iolimit.WithChunk(0)}, iolimit.ErrInvalidChunk},
		{"negative chunk", ctx, l, p, "k", []iolimit.Option{iolimit.WithChunk(-5)}, iolimit.ErrInvalidChunk},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := iolimit.NewReader(c.ctx, strings.NewReader("x"), c.l, c.p, c.key, c.opts...)
			if !errors.Is(err, c.want) || r != nil {
				t.Errorf("NewReader: %v, %v; want %v", r, err, c.want)
			}
			w, err := iolimit.NewWriter(c.ctx, io.Discard, c.l, c.p, c.key, c.opts...)
			if !errors.Is(err, c.want) || w != nil {
				t.Errorf("NewWriter: %v, %v; want %v", w, err, c.want)
			}
		})
	}
	if _, err := iolimit.NewReader(ctx, nil, l, p, "k"); !errors.Is(err, iolimit.ErrNoReader) {
		t.Errorf("NewReader(nil reader): %v", err)
	}
	if _, err := iolimit.NewWriter(ctx, nil, l, p, "k"); !errors.Is(err, iolimit.ErrNoWriter) {
		t.Errorf("NewWriter(nil writer): %v", err)
	}
	// The longest key works; a nil option is ignored.
	if _, err := iolimit.NewReader(ctx, strings.NewReader("x"), l, p, long[1:], nil); err != nil {
		t.Errorf("NewReader with a key of MaxKeyLen bytes: %v", err)
	}
}

func TestDefaultChunk(t *testing.T) {
	for _, c := range []struct {
		name   string
		limits []ratelease.Limit
		want   int
	}{
		{"1 GB/s", []ratelease.Limit{ratelease.PerSecond(1_000_000_000)}, 100_000_000},
		{"1 MiB/s", []ratelease.Limit{ratelease.PerSecond(1 << 20)}, 104857},
		{"a burst below a tenth of a second", []ratelease.Limit{{Rate: 1 << 20, Period: time.Second, Burst: 50_000}}, 50_000},
		{"slow: at least MinChunk", []ratelease.Limit{ratelease.PerSecond(2048)}, iolimit.MinChunk},
		{"slow and small: the capacity", []ratelease.Limit{ratelease.PerSecond(100)}, 100},
		{"the tightest limit", []ratelease.Limit{ratelease.PerSecond(1_000_000), {Rate: 2_000_000, Period: 10 * time.Second}}, 20_000},
		{"a log's capacity", []ratelease.Limit{{Rate: 1_000_000, Period: time.Second, Algorithm: ratelease.SlidingWindowLog}}, 1000}, // a log takes at most 1000 units a request,
		{"a fixed window", []ratelease.Limit{{Rate: 600_000, Period: time.Minute, Algorithm: ratelease.FixedWindow}}, 1024},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := iolimit.DefaultChunk(policy(t, "p", c.limits...)); got != c.want {
				t.Errorf("DefaultChunk = %d, want %d", got, c.want)
			}
		})
	}
	if got := iolimit.DefaultChunk(nil); got != 0 {
		t.Errorf("DefaultChunk(nil) = %d", got)
	}
	if got := iolimit.DefaultChunk(&ratelease.Policy{}); got != 0 {
		t.Errorf("DefaultChunk(zero policy) = %d", got)
	}
}

// errAfter is a reader of n bytes that then fails with err.
type errAfter struct {
	n   int
	err error
}

func (r *errAfter) Read(b []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := min(len(b), r.n)
	r.n -= k
	return k, nil
}

var errBoom = errors.New("boom")

// A Reader charges exactly the bytes it read, whatever the underlying
// reader returns per call (full reads, short ones, data with io.EOF, an
// error mid-stream), with any buffer and chunk size: what was charged and
// not read comes back.
func TestReaderChargesWhatItReads(t *testing.T) {
	const size = 3000
	data := bytes.Repeat([]byte("0123456789"), size/10)
	for _, c := range []struct {
		name    string
		src     func() io.Reader
		want    int // bytes read
		wantErr error
	}{
		{"full reads", func() io.Reader { return bytes.NewReader(data) }, size, nil},
		{"half reads", func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) }, size, nil},
		{"one byte reads", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) }, size, nil},
		{"data with EOF", func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) }, size, nil},
		{"an error mid-stream", func() io.Reader { return &errAfter{n: 1333, err: errBoom} }, 1333, errBoom},
	} {
		for _, chunk := range []int{37, 700, 100_000} {
			for _, buf := range []int{100, 32 << 10} {
				env := ratetest.New(t)
				p := hourly(t)
				r, err := iolimit.NewReader(ctx, c.src(), env.Limiter(), p, "k", iolimit.WithChunk(chunk))
				if err != nil {
					t.Fatal(err)
				}
				// (Neither side's ReadFrom or WriteTo: the buffer is used.)
				n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{r}, make([]byte, buf))
				if n != int64(c.want) || !errors.Is(err, c.wantErr) {
					t.Fatalf("%s, chunk %d, buffer %d: copied %d, %v; want %d, %v", c.name, chunk, buf, n, err, c.want, c.wantErr)
				}
				if got := remaining(t, env, p, "k"); got != 100_000-c.want {
					t.Fatalf("%s, chunk %d, buffer %d: %d bytes left of 100000 after reading %d: charged %d",
						c.name, chunk, buf, got, c.want, 100_000-got)
				}
			}
		}
	}
}

// Bytes a Reader holds (charged, not read: a short read) go back at Close
// and when its context is done; Close closes the underlying reader.
func TestReaderGivesBackWhatItHolds(t *testing.T) {
	env := ratetest.New(t)
	p := hourly(t)
	src := &closer{Reader: iotest.HalfReader(strings.NewReader(strings.Repeat("x", 5000)))}
	r, err := iolimit.NewReader(ctx, src, env.Limiter(), p, "k")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1000)
	if n, err := r.Read(b); n != 500 || err != nil { // charged 1000, read 500
		t.Fatalf("Read: %d, %v", n, err)
	}
	if got := remaining(t, env, p, "k"); got != 99_000 {
		t.Fatalf("after a short read: %d left, want 99000 (the 500 held stay charged)", got)
	}
	if n, err := r.Read(b); n != 250 || err != nil { // from the 500 held: no charge
		t.Fatalf("second Read: %d, %v", n, err)
	}
	if got := remaining(t, env, p, "k"); got != 99_000 {
		t.Fatalf("after reading from what was held: %d left, want 99000", got)
	}
	if err := r.Close(); err != nil || !src.closed {
		t.Fatalf("Close: %v, underlying closed %v", err, src.closed)
	}
	if got := remaining(t, env, p, "k"); got != 100_000-750 {
		t.Fatalf("after Close: %d left, want %d (the 250 held given back)", got, 100_000-750)
	}

	// Held bytes go back when the context ends; the context's error comes
	// back unwrapped.
	cctx, cancel := context.WithCancel(ctx)
	r, err = iolimit.NewReader(cctx, iotest.HalfReader(strings.NewReader(strings.Repeat("x", 5000))), env.Limiter(), p, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(b); n != 500 || err != nil {
		t.Fatalf("Read: %d, %v", n, err)
	}
	cancel()
	if n, err := r.Read(b); n != 0 || err != context.Canceled {
		t.Fatalf("Read after cancel: %d, %v; want 0, context.Canceled", n, err)
	}
	if got := remaining(t, env, p, "k2"); got != 100_000-500 {
		t.Fatalf("after cancel: %d left, want %d", got, 100_000-500)
	}
	// A Reader of a reader that is not an io.Closer closes fine.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

type closer struct {
	io.Reader
	closed bool
}

func (c *closer) Close() error { c.closed = true; return nil }

// failingWriter writes n bytes, then fails with err (or writes short, with
// no error, when err is nil).
type failingWriter struct {
	n   int
	err error
}

func (w *failingWriter) Write(b []byte) (int, error) {
	if len(b) <= w.n {
		w.n -= len(b)
		return len(b), nil
	}
	k := w.n
	w.n = 0
	return k, w.err
}

// A Writer charges exactly the bytes written: a chunk that fails or writes
// short gives back what it did not write.
func TestWriterChargesWhatItWrites(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 10_000)
	for _, c := range []struct {
		name    string
		w       io.Writer
		want    int
		wantErr error
		chunks  uint64 // the decisions: one per chunk tried
	}{
		{"all", io.Discard, 10_000, nil, 10},
		{"an error", &failingWriter{n: 1234, err: errBoom}, 1234, errBoom, 2},
		{"a short write", &failingWriter{n: 4321}, 4321, io.ErrShortWrite, 5},
		{"an error at a chunk's end", &failingWriter{n: 3000, err: errBoom}, 3000, errBoom, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := ratetest.New(t)
			p := hourly(t)
			w, err := iolimit.NewWriter(ctx, c.w, env.Limiter(), p, "k", iolimit.WithChunk(1000))
			if err != nil {
				t.Fatal(err)
			}
			n, err := w.Write(data)
			if n != c.want || !errors.Is(err, c.wantErr) {
				t.Fatalf("Write: %d, %v; want %d, %v", n, err, c.want, c.wantErr)
			}
			if got := remaining(t, env, p, "k"); got != 100_000-c.want {
				t.Fatalf("%d bytes left after writing %d: charged %d", got, c.want, 100_000-got)
			}
			// One decision per chunk of 1000 tried, never more bytes at once.
			if s := env.Limiter().Stats(); s.Allowed != c.chunks {
				t.Fatalf("%d decisions for %d bytes in chunks of 1000, want %d", s.Allowed, c.want, c.chunks)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// An empty write passes through, charging nothing.
	env := ratetest.New(t)
	p := hourly(t)
	w, _ := iolimit.NewWriter(ctx, io.Discard, env.Limiter(), p, "k")
	if n, err := w.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil): %d, %v", n, err)
	}
	if s := env.Limiter().Stats(); s.Allowed+s.Denied != 0 {
		t.Fatalf("an empty write made %d decisions", s.Allowed+s.Denied)
	}
}

// A chunk is never more than the policy's capacity, whatever WithChunk or
// the buffer asks: every WaitN can be admitted.
func TestChunkNeverAboveCapacity(t *testing.T) {
	env := ratetest.New(t)
	p := policy(t, "small", ratelease.Limit{Rate: 1_000_000, Period: time.Hour, Burst: 300})
	w, err := iolimit.NewWriter(ctx, io.Discard, env.Limiter(), p, "k", iolimit.WithChunk(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write(make([]byte, 300)); n != 300 || err != nil {
		t.Fatalf("Write(300) with a burst of 300: %d, %v", n, err)
	}
	r, err := iolimit.NewReader(ctx, bytes.NewReader(make([]byte, 1<<20)), env.Limiter(), p, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(make([]byte, 1<<20)); n != 300 || err != nil {
		t.Fatalf("Read of 1 MiB with a burst of 300: %d, %v; want 300 at most", n, err)
	}
}

// step drives a copy on the Env's clock: whenever the copy sleeps, the
// time moves by d. It returns when done yields the copy's result.
func step[T any](t *testing.T, env *ratetest.Env, d time.Duration, done <-chan T) T {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case v := <-done:
			return v
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the copy did not end within 30s")
		}
		if env.Clock().Timers() > 0 {
			env.Advance(d)
		} else {
			runtime.Gosched()
		}
	}
}

type copied struct {
	n   int64
	err error
}

// Paced on the Env's clock: 1000 bytes/s with a burst of 1000, in chunks
// of 100. 3000 bytes are written in exactly 2s: the burst at once, then a
// chunk every 100ms; every chunk is one decision (30), none denied: a
// chunk past the burst is taken ahead and waits for its slot (WaitN
// reserves). Read, they take 2.1s: the read that finds the end of the
// source is charged a chunk too, like any other (the Reader cannot know
// it is the end before it reads), and the chunk is refunded.
func TestPacedExactly(t *testing.T) {
	for _, dir := range []string{"read", "write"} {
		t.Run(dir, func(t *testing.T) {
			env := ratetest.New(t)
			p := policy(t, "paced", ratelease.PerSecond(1000))
			done := make(chan copied, 1)
			src := bytes.NewReader(make([]byte, 3000))
			var err error
			var r io.Reader
			var w io.Writer
			if dir == "read" {
				r, err = iolimit.NewReader(ctx, src, env.Limiter(), p, "k", iolimit.WithChunk(100))
				w = io.Discard
			} else {
				r = src
				w, err = iolimit.NewWriter(ctx, io.Discard, env.Limiter(), p, "k", iolimit.WithChunk(100))
			}
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				n, err := io.Copy(w, r)
				done <- copied{n, err}
			}()
			res := step(t, env, 100*time.Millisecond, done)
			if res.n != 3000 || res.err != nil {
				t.Fatalf("copied %d, %v", res.n, res.err)
			}
			want := map[string]struct {
				took            time.Duration
				allowed, denied uint64
				left            int
			}{"read": {2100 * time.Millisecond, 31, 0, 100}, "write": {2 * time.Second, 30, 0, 0}}[dir]
			if took := env.Now().Sub(ratetest.Epoch); took != want.took {
				t.Fatalf("3000 bytes took %v at 1000/s with a burst of 1000, want %v", took, want.took)
			}
			if s := env.Limiter().Stats(); s.Allowed != want.allowed || s.Denied != want.denied {
				t.Fatalf("%d chunks admitted, %d waits; want %d and %d", s.Allowed, s.Denied, want.allowed, want.denied)
			}
			if got := remaining(t, env, p, "k"); got != want.left {
				t.Fatalf("%d left at the end, want %d", got, want.left)
			}
		})
	}
}

// A cancelled context stops a copy that waits for the limit: the copy
// returns the context's error, unwrapped, with what it moved before.
func TestCancelStopsTheCopy(t *testing.T) {
	for _, dir := range []string{"read", "write"} {
		t.Run(dir, func(t *testing.T) {
			env := ratetest.New(t)
			p := policy(t, "cancel", ratelease.PerSecond(1000))
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			src := bytes.NewReader(make([]byte, 5000))
			var err error
			var r io.Reader
			var w io.Writer
			if dir == "read" {
				r, err = iolimit.NewReader(cctx, src, env.Limiter(), p, "k", iolimit.WithChunk(100))
				w = io.Discard
			} else {
				r = src
				w, err = iolimit.NewWriter(cctx, io.Discard, env.Limiter(), p, "k", iolimit.WithChunk(100))
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan copied, 1)
			go func() {
				n, err := io.Copy(w, r)
				done <- copied{n, err}
			}()
			for env.Clock().Timers() == 0 { // the burst moved; the copy waits
				runtime.Gosched()
			}
			cancel()
			res := <-done
			if res.n != 1000 || res.err != context.Canceled {
				t.Fatalf("copy: %d, %v; want the burst of 1000 and context.Canceled", res.n, res.err)
			}
			// Nothing is held or lost: the bucket is empty (1000 charged),
			// and refills as usual.
			env.Advance(time.Second)
			if got := remaining(t, env, p, "k"); got != 1000 {
				t.Fatalf("a second later: %d left, want 1000", got)
			}
			// The next Read or Write returns the error at once.
			if dir == "read" {
				if n, err := r.Read(make([]byte, 10)); n != 0 || err != context.Canceled {
					t.Fatalf("Read after cancel: %d, %v", n, err)
				}
			} else if n, err := w.Write(make([]byte, 10)); n != 0 || err != context.Canceled {
				t.Fatalf("Write after cancel: %d, %v", n, err)
			}
		})
	}
}

// A deadline that would pass before the next chunk is admitted ends the
// copy at once with context.DeadlineExceeded (WaitN's rule), not after
// sleeping until it.
func TestDeadlineEndsAtOnce(t *testing.T) {
	env := ratetest.New(t)
	p := policy(t, "deadline", ratelease.PerHour(1000))
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := iolimit.NewReader(dctx, bytes.NewReader(make([]byte, 5000)), env.Limiter(), p, "k")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := io.Copy(io.Discard, r)
	if n != 1000 || err != context.DeadlineExceeded {
		t.Fatalf("copy: %d, %v; want the burst and context.DeadlineExceeded", n, err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("waited %v for a deadline a minute away", waited)
	}
}

// The Limiter's errors end the copy: a closed Limiter's ErrClosed.
func TestLimiterErrors(t *testing.T) {
	env := ratetest.New(t)
	p := hourly(t)
	other, err := env.NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	r, err := iolimit.NewReader(ctx, strings.NewReader("hello"), other, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, ratelease.ErrClosed) {
		t.Fatalf("ReadAll through a closed Limiter: %v", err)
	}
	w, err := iolimit.NewWriter(ctx, io.Discard, other, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write([]byte("hello")); n != 0 || !errors.Is(err, ratelease.ErrClosed) {
		t.Fatalf("Write through a closed Limiter: %d, %v", n, err)
	}
}

// Streams that lie about their counts are an error, not a panic, and
// charge nothing for the bytes they claim.
func TestInvalidCounts(t *testing.T) {
	env := ratetest.New(t)
	p := hourly(t)
	r, _ := iolimit.NewReader(ctx, liar{}, env.Limiter(), p, "k")
	if n, err := r.Read(make([]byte, 10)); n != 0 || err == nil {
		t.Fatalf("Read of a reader that returns -1: %d, %v", n, err)
	}
	w, _ := iolimit.NewWriter(ctx, liar{}, env.Limiter(), p, "k")
	if n, err := w.Write(make([]byte, 10)); n != 0 || err == nil {
		t.Fatalf("Write to a writer that returns 11 of 10: %d, %v", n, err)
	}
	if got := remaining(t, env, p, "k"); got != 100_000 {
		t.Fatalf("%d left, want all 100000: nothing moved", got)
	}
}

type liar struct{}

func (liar) Read([]byte) (int, error)    { return -1, nil }
func (liar) Write(b []byte) (int, error) { return len(b) + 1, nil }

// In lease mode (the Limiter's default) the Reader and Writer work the
// same: bytes charged come from leases (on a clock that stands still, a
// lease of what is asked: no demand can be measured), and over the stream
// exactly the bytes moved stay spent once the Limiter gives its leases
// back.
func TestLeaseMode(t *testing.T) {
	env := ratetest.New(t, ratelease.WithLease(ratelease.LeaseConfig{}))
	p := hourly(t)
	r, err := iolimit.NewReader(ctx, iotest.HalfReader(bytes.NewReader(make([]byte, 20_000))), env.Limiter(), p, "k", iolimit.WithChunk(1500))
	if err != nil {
		t.Fatal(err)
	}
	w, err := iolimit.NewWriter(ctx, io.Discard, env.Limiter(), p, "k", iolimit.WithChunk(700))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(w, r); n != 20_000 || err != nil {
		t.Fatalf("copy: %d, %v", n, err)
	}
	if err := env.Limiter().Close(); err != nil {
		t.Fatal(err)
	}
	exact, err := env.NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	res, err := exact.Peek(ctx, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Read and written: 20,000 each, both charged to the key.
	if res.Remaining != 100_000-40_000 {
		t.Fatalf("%d left after moving 20000 bytes in and out: charged %d, want 40000", res.Remaining, 100_000-res.Remaining)
	}
}
