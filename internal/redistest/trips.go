package redistest

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Trips is a go-redis hook that counts what a client sends to Redis:
// Trips, the round trips (one per command sent alone, one per pipeline),
// and Cmds, the commands (a pipeline's count of them). The handshake that
// go-redis makes on each new connection (HELLO, CLIENT ..., AUTH, SELECT)
// is counted apart, in Handshakes: no client can avoid it, and on a small
// workload it would outweigh what the code under test sends. Add it with
// AddHook before the client is first used; it is safe for concurrent use.
type Trips struct {
	Trips, Cmds, Handshakes atomic.Int64
}

var _ redis.Hook = (*Trips)(nil)

// DialHook counts nothing: a dial is not a command.
func (c *Trips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command sent alone: one round trip, one command.
func (c *Trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isHandshake(cmd) {
			c.Handshakes.Add(1)
		} else {
			c.Trips.Add(1)
			c.Cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline: one round trip, len(cmds)
// commands; a pipeline of handshake commands only is one handshake.
func (c *Trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return !isHandshake(cmd) }) {
			c.Handshakes.Add(1)
		} else {
			c.Trips.Add(1)
			c.Cmds.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// isHandshake reports whether cmd is one that go-redis sends when it sets
// up a connection.
func isHandshake(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
