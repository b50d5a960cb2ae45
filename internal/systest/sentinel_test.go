package systest_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// A primary behind Sentinel dies and its replica takes over, under load
// through a failover client (8 goroutines, one instance, FailLocal): no
// error, no decision waits much longer than the Redis timeout, the limit
// holds through the failover (from the fallback, then from the new
// primary), and decisions come from the new primary once Sentinel has
// promoted it.
func TestSentinelFailover(t *testing.T) {
	const rate, burst = 1000, 100
	s := redistest.StartSentinel(t, "rl")
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.Name, SentinelAddrs: []string{s.Addr}, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	l, err := ratelease.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := policy(t, "fo", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	// Redis's clock, read on the replica: it lives throughout, and the
	// primary's clock, and the promoted replica's, are this machine's.
	now := redisClock(t, s.Replica.Client(t))
	run := span{start: now()}
	// 4 s for Sentinel to promote the replica (about 1 s here), then 3 s in
	// which the breaker's probe, backing off by then up to 3.2 s, finds it.
	phases := phasedLoad(t, []*ratelease.Limiter{l}, loadSpec{goroutines: 8, pause: 50 * time.Microsecond, keys: []string{"k"}}, p,
		[]time.Duration{time.Second, 4 * time.Second, 3 * time.Second}, func(i int) {
			if i == 1 {
				s.Primary.Kill()
			}
		})
	run.end = now()
	if got := s.PrimaryAddr(t); got != s.Replica.Addr {
		t.Fatalf("no failover: Sentinel gives %s as the primary, want the replica %s", got, s.Replica.Addr)
	}
	before, during, after := phases[0].keys[0], phases[1].keys[0], phases[2].keys[0]
	st := l.Stats()
	perSecond := float64(during.admitted) / phases[1].seconds()
	t.Logf("during the failover: %d decisions, sources %v, admitted %.0f/s; after: sources %v; %d breaker openings",
		during.decisions, during.sources, perSecond, after.sources, st.BreakerOpens)
	if n := before.errors + during.errors + after.errors; n != 0 {
		t.Errorf("%d errors in FailLocal", n)
	}
	checkLatency(t, "during the failover", during, phases[1].lag, defaultRedisTimeout)
	if perSecond < 0.7*rate || perSecond > 1.3*rate {
		t.Errorf("admitted %.0f/s during the failover, want %d ± 30%%", perSecond, rate)
	}
	// Burst + Rate·T, plus the outage allowance of docs/degradation.md, plus
	// one Burst for the writes the replica may not have had when the primary
	// died (replication is asynchronous: like a restart, at worst).
	total := before.admitted + during.admitted + after.admitted
	bound := bucket(rate, burst)(run) + 2*burst*float64(st.BreakerOpens) + burst
	t.Logf("admitted %d over %.3fs of Redis time, bound %.0f (before %d in %.2fs, during %d in %.2fs, after %d in %.2fs; charged %d)", total, run.seconds(), bound, before.admitted, phases[0].seconds(), during.admitted, phases[1].seconds(), after.admitted, phases[2].seconds(), st.UnitsCharged)
	atMost(t, "through the failover", float64(total), bound)
	// The old primary is dead: a decision from Redis now came from the replica.
	if after.sources[ratelease.SourceLocal]+after.sources[ratelease.SourceRemote] == 0 {
		t.Errorf("the replica promoted, and no decision came from it: %v", after.sources)
	}
	if st.Breaker != ratelease.BreakerClosed {
		t.Errorf("breaker %v after the failover", st.Breaker)
	}
}
