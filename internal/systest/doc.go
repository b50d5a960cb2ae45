// Package systest holds the system tests of ratelease: the public API on
// real Redis processes, started by internal/redistest on free loopback
// ports. It owns the tests that need more than one process or more than a
// moment: several Limiters sharing a limit (accuracy across instances,
// fairness, the economy of leasing), a Redis Cluster, a Ring and Sentinel,
// faults (a hung, killed, restarted, slow or unreachable Redis, chaos), and
// the benchmarks behind docs/scaling.md, docs/leasing.md and
// docs/shapes.md (go test -run '^$' -bench . ./internal/systest). Unit tests
// and examples stay with the package they test.
//
// The package has no code of its own: its tests (package systest_test)
// import only the public API, internal/redistest and test dependencies, and
// share the harness in harness_test.go (instances, Redis's clock, bounds,
// floors) and load_test.go (the loads).
//
// Every bound is measured on Redis's clock (TIME), read right before a load
// starts and right after it ends, so that a slow machine lengthens the span
// the bound is computed over instead of breaking it; what a bound allows is
// asserted exactly, as the README and docs/ state it. What a run must reach
// (a floor of admitted units, a round-trip budget) depends on how much of
// the machine the run gets: it is asserted at what the engine reaches on a
// loaded 2-core machine sharing its cores with Redis, not at what an idle
// one reaches; the benchmarks report those figures.
//
// Run them with the rest: go test -race -shuffle=on -p 1 ./... (needs
// redis-server and redis-cli; see CONTRIBUTING.md).
package systest
