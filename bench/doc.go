// Package bench measures ratelease against its peers on one workload: the
// same limit and the same keys through ratelease in lease mode and in exact
// mode, github.com/go-redis/redis_rate/v10, github.com/ulule/limiter/v3
// (Redis store) and golang.org/x/time/rate (per process, no global limit),
// on one real redis-server that the benchmark starts itself on a loopback
// port.
//
// It is a module of its own, so that the peers never enter ratelease's
// go.mod. It measures two things:
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
//
// The command in cmd/benchreport runs both and writes docs/benchmarks.md:
//
//	cd bench && go run ./cmd/benchreport
//
// The decision benchmarks also run under go test, for benchstat:
//
//	cd bench && go test -run '^$' -bench . -benchmem -count 6 > out/new.txt
//
// This package is a harness, not an API: it may change with every run.
package bench
