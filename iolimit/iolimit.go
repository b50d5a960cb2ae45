package iolimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/ratelease/ratelease"
)

// The errors of NewReader and NewWriter, matched with errors.Is. An empty
// or too long key is ratelease.ErrInvalidKey.
var (
	// ErrNoContext: a nil context.
	ErrNoContext = errors.New("iolimit: nil context")
	// ErrNoReader: a nil io.Reader for NewReader.
	ErrNoReader = errors.New("iolimit: nil reader")
	// ErrNoWriter: a nil io.Writer for NewWriter.
	ErrNoWriter = errors.New("iolimit: nil writer")
	// ErrNoLimiter: a nil *ratelease.Limiter.
	ErrNoLimiter = errors.New("iolimit: nil Limiter")
	// ErrNoPolicy: a nil *ratelease.Policy, or a zero one (not made by
	// ratelease.NewPolicy).
	ErrNoPolicy = errors.New("iolimit: nil policy")
	// ErrInvalidChunk: WithChunk with a size below 1.
	ErrInvalidChunk = errors.New("iolimit: invalid chunk size")
)

// errInvalidCount: the underlying stream returned a count outside 0 to
// what it was given (io.Reader and io.Writer forbid it).
var errInvalidCount = errors.New("iolimit: the underlying stream returned an invalid count")

// Chunk sizes (DefaultChunk).
const (
	// ChunkTime is the time's worth of the policy's tightest limit that a
	// default chunk holds.
	ChunkTime = 100 * time.Millisecond
	// MinChunk is the least default chunk, in bytes, when the policy's
	// capacity allows it: a slow limit charges no fewer bytes at a time.
	MinChunk = 1024
)

// DefaultChunk returns the chunk size, in bytes, that a Reader or Writer
// charges at most at a time under p when no WithChunk says otherwise: what
// p's tightest limit (the fewest units per second) allows in ChunkTime, at
// least MinChunk, and at most p.Capacity() (the most one request can ever
// be admitted). For 1 GB/s it is 100 MB, for 1 MiB/s 104857 bytes, for
// 1 KiB/s with a burst of 1 KiB 1024 bytes. It returns 0 for a nil or
// zero policy.
func DefaultChunk(p *ratelease.Policy) int {
	if p == nil || p.Name() == "" {
		return 0
	}
	perSecond := math.Inf(1)
	for _, l := range p.Limits() {
		perSecond = min(perSecond, float64(l.Rate)/l.Period.Seconds())
	}
	chunk := max(float64(MinChunk), math.Floor(perSecond*ChunkTime.Seconds()))
	return int(min(chunk, float64(p.Capacity())))
}

// Option configures a Reader or a Writer. A nil Option is ignored.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithChunk sets the most bytes charged at a time (DefaultChunk(p) by
// default); at most p's capacity: a larger n is cut to it. Smaller chunks
// pace a stream more smoothly, with more decisions. An n below 1 is an
// error wrapping ErrInvalidChunk.
func WithChunk(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: %d, want at least 1", ErrInvalidChunk, n)
		}
		c.chunk = n
		return nil
	})
}

type config struct {
	chunk int // 0: DefaultChunk
}

// meter is what a Reader and a Writer share: the limit they charge, and
// how.
type meter struct {
	ctx   context.Context
	l     *ratelease.Limiter
	p     *ratelease.Policy
	key   string
	chunk int
}

// newMeter checks the arguments of NewReader and NewWriter (stream is
// ErrNoReader's or ErrNoWriter's verdict, nil when the stream is there).
func newMeter(ctx context.Context, stream error, l *ratelease.Limiter, p *ratelease.Policy, key string, opts []Option) (meter, error) {
	switch {
	case ctx == nil:
		return meter{}, ErrNoContext
	case stream != nil:
		return meter{}, stream
	case l == nil:
		return meter{}, ErrNoLimiter
	case p == nil:
		return meter{}, ErrNoPolicy
	case p.Name() == "":
		return meter{}, fmt.Errorf("%w: a zero Policy: make one with ratelease.NewPolicy", ErrNoPolicy)
	case key == "":
		return meter{}, fmt.Errorf("%w: empty key", ratelease.ErrInvalidKey)
	case len(key) > ratelease.MaxKeyLen:
		return meter{}, fmt.Errorf("%w: %d bytes, more than %d", ratelease.ErrInvalidKey, len(key), ratelease.MaxKeyLen)
	}
	var c config
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&c); err != nil {
			return meter{}, err
		}
	}
	chunk := DefaultChunk(p)
	if c.chunk > 0 {
		chunk = min(c.chunk, p.Capacity())
	}
	return meter{ctx: ctx, l: l, p: p, key: key, chunk: chunk}, nil
}

// charge waits until n bytes are admitted. It returns the context's error
// once it is done, even when the Limiter could admit at once from memory.
func (m *meter) charge(n int) error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	return m.l.WaitN(m.ctx, m.p, m.key, n)
}

// refund gives back n bytes charged and not moved, with the context's
// values but not its cancellation: a stream ended by its context still
// gives back what it holds. Its error is dropped: those bytes stay spent.
func (m *meter) refund(n int) {
	if n > 0 {
		_ = m.l.Refund(context.WithoutCancel(m.ctx), m.p, m.key, n)
	}
}

// Reader is an io.Reader whose bytes are charged to a key under a policy:
// see the package doc. Make it with NewReader. It is for one goroutine at
// a time.
type Reader struct {
	m meter
	r io.Reader
	// held counts the bytes charged and not read yet: what the last
	// charge's read did not fill. The next reads take them first.
	held int
}

var _ io.ReadCloser = (*Reader)(nil)

// NewReader returns a Reader of r that charges the bytes it reads to key
// under p, with l, until ctx is done. Errors: ErrNoContext, ErrNoReader,
// ErrNoLimiter, ErrNoPolicy, ratelease.ErrInvalidKey, ErrInvalidChunk.
func NewReader(ctx context.Context, r io.Reader, l *ratelease.Limiter, p *ratelease.Policy, key string, opts ...Option) (*Reader, error) {
	var stream error
	if r == nil {
		stream = ErrNoReader
	}
	m, err := newMeter(ctx, stream, l, p, key, opts)
	if err != nil {
		return nil, err
	}
	return &Reader{m: m, r: r}, nil
}

// Read reads into b what the limit admits: with no bytes held from an
// earlier charge, it waits until min(len(b), the chunk size) bytes are
// admitted, then reads at most the bytes held. Bytes held that a read
// did not fill are kept for the next Read; when the read fails or ends
// (io.EOF included), they are refunded. Once the Reader's context is done,
// Read refunds what it holds and returns the context's error.
func (r *Reader) Read(b []byte) (int, error) {
	if err := r.m.ctx.Err(); err != nil {
		r.release()
		return 0, err
	}
	if len(b) == 0 {
		return r.r.Read(b)
	}
	if r.held == 0 {
		n := min(len(b), r.m.chunk)
		if err := r.m.charge(n); err != nil {
			return 0, err
		}
		r.held = n
	}
	asked := min(len(b), r.held)
	n, err := r.r.Read(b[:asked])
	if n < 0 || n > asked {
		n, err = 0, errInvalidCount
	}
	r.held -= n
	if err != nil {
		r.release()
	}
	return n, err
}

// release refunds the bytes held.
func (r *Reader) release() {
	r.m.refund(r.held)
	r.held = 0
}

// Close refunds the bytes the Reader holds (charged and not read), then
// closes the underlying reader if it is an io.Closer and returns its
// error; else it returns nil.
func (r *Reader) Close() error {
	r.release()
	if c, ok := r.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Writer is an io.Writer whose bytes are charged to a key under a policy:
// see the package doc. Make it with NewWriter. It is for one goroutine at
// a time.
type Writer struct {
	m meter
	w io.Writer
}

var _ io.WriteCloser = (*Writer)(nil)

// NewWriter returns a Writer to w that charges the bytes it writes to key
// under p, with l, until ctx is done. Errors: ErrNoContext, ErrNoWriter,
// ErrNoLimiter, ErrNoPolicy, ratelease.ErrInvalidKey, ErrInvalidChunk.
func NewWriter(ctx context.Context, w io.Writer, l *ratelease.Limiter, p *ratelease.Policy, key string, opts ...Option) (*Writer, error) {
	var stream error
	if w == nil {
		stream = ErrNoWriter
	}
	m, err := newMeter(ctx, stream, l, p, key, opts)
	if err != nil {
		return nil, err
	}
	return &Writer{m: m, w: w}, nil
}

// Write writes b in chunks, each written once the limit admits it. It
// returns the bytes written and, when that is less than len(b), why: the
// underlying writer's error (io.ErrShortWrite for a short write without
// one), the context's error once it is done, or the Limiter's. A chunk's
// bytes that were not written are refunded.
func (w *Writer) Write(b []byte) (int, error) {
	if len(b) == 0 {
		if err := w.m.ctx.Err(); err != nil {
			return 0, err
		}
		return w.w.Write(b)
	}
	written := 0
	for written < len(b) {
		n := min(len(b)-written, w.m.chunk)
		if err := w.m.charge(n); err != nil {
			return written, err
		}
		m, err := w.w.Write(b[written : written+n])
		if m < 0 || m > n {
			m, err = 0, errInvalidCount
		}
		written += m
		if m < n {
			w.m.refund(n - m)
			if err == nil {
				err = io.ErrShortWrite
			}
			return written, err
		}
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// Close closes the underlying writer if it is an io.Closer and returns its
// error; else it returns nil. A Writer holds no bytes to refund.
func (w *Writer) Close() error {
	if c, ok := w.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
