package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node names the server that holds key's state under p, for failure
// accounting per server: with a *redis.ClusterClient, the address of the
// master of the key's slot as the client last saw the cluster; with any
// other client "", one name for all (a single server, a failover client,
// or a Ring, which itself moves the keys of a shard it finds down to the
// others). It may load the cluster's layout on first use, within ctx; ""
// when it cannot tell, and with a nil p.
func (s *Store) Node(ctx context.Context, p *Policy, key string) string {
	if p == nil {
		return ""
	}
	return s.NodeOf(ctx, p.Keys(s.prefix, key)[0])
}

// NodeOf is Node for one Redis key, named whole.
func (s *Store) NodeOf(ctx context.Context, redisKey string) string {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := c.MasterForKey(ctx, redisKey)
	if err != nil {
		return ""
	}
	s.layout.Store(true)
	return m.Options().Addr
}

// Ping asks every server that holds limiter state whether it answers, and
// lets this client run scripts: with a Redis Cluster every master, with a
// Ring every shard, else the one server. It returns the first failure,
// naming the server: its reply (NOPERM for a user who may not run
// scripts, WRONGPASS...), or the client's error.
func (s *Store) Ping(ctx context.Context) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return named(m.Options().Addr, ping(ctx, m))
		})
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, sh *redis.Client) error {
			return named(sh.Options().Addr, ping(ctx, sh))
		})
	}
	return s.named(nil, "", ping(ctx, s.client))
}

// pingScript is what Ping runs besides PING: a script that touches no
// key, which Redis refuses (NOPERM) to a user who may not run scripts.
var pingScript = redis.NewScript("return 1")

// ping sends PING and runs pingScript on c, in one pipeline (and a second
// the first time, to load the script).
func ping(ctx context.Context, c redis.Cmdable) error {
	var run *redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		run = pingScript.EvalSha(ctx, p, nil)
		return nil
	})
	if redis.HasErrorPrefix(run.Err(), "NOSCRIPT") {
		err = pingScript.Eval(ctx, c, nil).Err()
	}
	return err
}

// MaxmemoryPolicies reads the maxmemory-policy of the servers that node
// names (see Node), with CONFIG GET: with a *redis.ClusterClient the master
// at that address (none for ""); with a Ring every shard; else the one
// server. It returns each server's policy by its address ("" for the one
// server of a Client or a failover client). The error is the first
// failure: Redis's own reply (a redis.Error) when it refuses CONFIG (an ACL
// without +config|get: NOPERM; a managed Redis without CONFIG), or the
// client's.
func (s *Store) MaxmemoryPolicies(ctx context.Context, node string) (map[string]string, error) {
	var mu sync.Mutex
	policies := map[string]string{}
	read := func(ctx context.Context, c redis.Cmdable, addr string) error {
		v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return err
		}
		p, ok := v["maxmemory-policy"]
		if !ok {
			return fmt.Errorf("CONFIG GET maxmemory-policy: no such parameter in %v", v)
		}
		mu.Lock()
		policies[addr] = p
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		if node == "" {
			return policies, nil
		}
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if addr := m.Options().Addr; addr == node {
				return read(ctx, m, addr)
			}
			return nil
		})
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, sh *redis.Client) error {
			return read(ctx, sh, sh.Options().Addr)
		})
	default:
		err = read(ctx, s.client, "")
	}
	return policies, err
}

// Refused reports whether err is Redis's own error reply (a redis.Error:
// NOPERM, an unknown command...), rather than a failure to reach Redis.
func Refused(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// Sharded reports whether Node can name more than one server.
func (s *Store) Sharded() bool {
	_, ok := s.client.(*redis.ClusterClient)
	return ok
}

// HonoursDeadlines reports whether client cuts a call short at its
// context's deadline. go-redis does so only when the client was made with
// ContextTimeoutEnabled: true, and sets read and write deadlines at all
// (a ReadTimeout or WriteTimeout of -2 turns them off, -1 once the
// options are set up); otherwise a read waits for the client's own
// ReadTimeout (seconds by default), or for ever, whatever the context
// says. Clients of other types are assumed not to.
func HonoursDeadlines(client redis.UniversalClient) bool {
	honours := func(enabled bool, read, write time.Duration) bool {
		return enabled && read >= 0 && write >= 0
	}
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		return honours(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.ClusterClient:
		o := c.Options()
		return honours(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.Ring:
		// A Ring keeps its options as given (each shard's client sets its
		// own up): there -2 turns deadlines off, and -1 only the client's
		// own timeout.
		o := c.Options()
		return honours(o.ContextTimeoutEnabled, o.ReadTimeout+1, o.WriteTimeout+1)
	}
	return false
}
