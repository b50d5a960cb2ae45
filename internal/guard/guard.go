package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrClosed is returned by Do once the Group's Close has begun.
var ErrClosed = errors.New("guard: closed")

// Group tracks the goroutines of guarded calls. The zero value is ready.
type Group struct {
	mu     sync.Mutex // orders wg.Add before Close's Wait
	closed bool
	wg     sync.WaitGroup
}

// States of a call.
const (
	pending int32 = iota
	delivered
	abandoned
)

// Do runs fn(ctx) on its own goroutine and returns its result, or ctx's
// error when ctx ends first. fn is given ctx itself: go-redis uses it only
// to wait for a connection and between retries, never to cut a reply short,
// so a call that got an answer from Redis always returns it. If the caller
// has left, the result is handed to late (when not nil) on fn's goroutine,
// which the Group tracks until late returns.
func Do[T any](g *Group, ctx context.Context, fn func(context.Context) (T, error), late func(T, error)) (T, error) {
	var zero T
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return zero, ErrClosed
	}
	g.wg.Add(1)
	g.mu.Unlock()
	c := &call[T]{done: make(chan struct{})} // one allocation for all of it
	go func() {
		defer g.wg.Done()
		c.v, c.err = fn(ctx)
		if c.state.CompareAndSwap(pending, delivered) {
			close(c.done)
			return
		}
		if late != nil {
			late(c.v, c.err)
		}
	}()
	select {
	case <-c.done:
		return c.v, c.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(pending, abandoned) {
			return zero, ctx.Err()
		}
		<-c.done // delivered just now
		return c.v, c.err
	}
}

// call hands fn's result from its goroutine to Do's caller.
type call[T any] struct {
	state atomic.Int32
	done  chan struct{}
	v     T
	err   error
}

// Go runs fn on a goroutine of its own that the Group tracks, as it tracks
// the calls of Do: for work in the background that Close must wait for. It
// reports false, and does not run fn, once Close has begun.
func (g *Group) Go(fn func()) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		fn()
	}()
	return true
}

// Close makes later calls fail with ErrClosed and waits for those still
// running until ctx ends; it reports whether they all ended. Those left end
// by themselves, at the client's own timeouts. Idempotent.
func (g *Group) Close(ctx context.Context) bool {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
