package redistest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchEnv is the environment variable that names a Redis (host:port) for
// benchmarks to use instead of starting one: to compare libraries on one
// server in one run.
const BenchEnv = "RATELEASE_BENCH_REDIS"

// BenchAddr returns the address of a real Redis for a benchmark: the one
// BenchEnv names, else that of a redis-server started for tb (see Start).
func BenchAddr(tb testing.TB) string {
	tb.Helper()
	if addr := os.Getenv(BenchEnv); addr != "" {
		return addr
	}
	return Start(tb).Addr
}

// InfoField reads one numeric field of an INFO section through c (the INFO
// command counts in the server's own command statistics).
func InfoField(tb testing.TB, c *redis.Client, section, field string) float64 {
	tb.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return f
		}
	}
	tb.Fatalf("redistest: INFO %s has no %s", section, field)
	return 0
}

// ScriptStats returns the µs and the calls of the scripts the server of c
// ran (FCALL and EVALSHA, whichever ran) since its statistics were last
// reset, from INFO commandstats.
func ScriptStats(tb testing.TB, c *redis.Client) (usec, calls float64) {
	tb.Helper()
	usec, calls, err := ReadScriptStats(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	return usec, calls
}

// ReadScriptStats is ScriptStats for programs without a testing.TB (a
// measuring tool): it returns an error where ScriptStats fails its test.
func ReadScriptStats(ctx context.Context, c *redis.Client) (usec, calls float64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_fcall") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if k != "usec" && k != "calls" {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("redistest: INFO commandstats %s: %w", line, err)
			}
			if k == "usec" {
				usec += f
			} else {
				calls += f
			}
		}
	}
	return usec, calls, nil
}

// WaterFill returns the max-min fair shares of capacity among demands:
// each gets its demand or an equal part of what the smaller demands left,
// whichever is less.
func WaterFill(capacity float64, demands []float64) []float64 {
	idx := make([]int, len(demands))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(demands[a], demands[b]) })
	shares := make([]float64, len(demands))
	left := capacity
	for k, i := range idx {
		shares[i] = min(demands[i], left/float64(len(idx)-k))
		left -= shares[i]
	}
	return shares
}
