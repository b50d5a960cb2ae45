// Package bench measures ratelease against its peers on the same
// workloads: the same limits and the same keys through ratelease in lease
// mode and in exact mode, github.com/go-redis/redis_rate/v10,
// github.com/ulule/limiter/v3 (Redis store) and golang.org/x/time/rate (per
// process, no global limit), on one real redis-server that the benchmark
// starts itself on a loopback port. The everyday and fleet workloads run
// through some of them only (see cmd/benchreport), the shared-key workload
// through ratelease alone, lease mode against exact mode.
//
// It is a module of its own, so that the peers never enter ratelease's
// go.mod. It measures five things:
//
//   - Decisions: what one decision costs one process (ns/op, B/op,
//     allocs/op), sequentially and from 32 goroutines, as decisions/s, and
//     the Redis round trips per decision, counted by a go-redis hook on the
//     client each peer is given (the handshake of a new connection apart).
//     The limit is far above the demand, so every decision admits: this is
//     the cost of the common case.
//   - Accuracy: four instances (each its own client, as four processes
//     would be) share one limit under a skewed demand of twice the limit;
//     accuracy is admitted ÷ (Burst + Rate·T), with T read from Redis's
//     clock.
//   - Everyday: a per-user key of PerSecond(5) that two instances each ask
//     every 500 ms for 10 s, under its limit: the round trips per decision
//     of the kind of key most of a service's keys are.
//   - Fleet: two busy instances at 4 × a key's limit, alone and beside 30
//     idle instances of the same peer: whether the busy key's round trips
//     per decision depend on the instances alive.
//   - Shared key: 10 to 300 instances, each a Limiter with the defaults and
//     a client of its own, on one key, each asking twice its share, and
//     300 over 10,000 keys drawn by a Zipf law, in lease mode and in exact
//     mode on the same demand: Redis's CPU (INFO cpu), its script calls
//     per decision and their µs (INFO commandstats), the bound and the
//     worst instance's max-min fair share.
//
// The command in cmd/benchreport runs them all and writes docs/benchmarks.md,
// and the shared-key workload's full table to docs/fleet.md:
//
//	cd bench && go run ./cmd/benchreport
//
// The shared-key workload alone, which writes docs/fleet.md and its plot
// only:
//
//	cd bench && go run ./cmd/benchreport -only shared-key
//
// The decision benchmarks also run under go test, for benchstat:
//
//	cd bench && go test -run '^$' -bench . -benchmem -count 6 > out/new.txt
//
// This package is a harness, not an API: it may change with every run.
package bench
