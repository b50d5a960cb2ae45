// The report's sections on what a decision costs in two regimes: exact
// mode's Redis time against the baseline's, and keys used a few times.

package main

import (
	"fmt"
	"slices"

	"github.com/ratelease/ratelease/bench"
)

// writeRedisTime renders what an exact decision costs Redis against the
// baseline's, admitting and denying (bench.RedisTime).
func writeRedisTime(p func(string, ...any), e env, rt map[redisTimeKey]decisionSamples, count int) {
	if len(rt) == 0 {
		return
	}
	p("\n### Exact mode's Redis time, admitting and denying\n\n")
	p("Exact mode with one token bucket against %s, on %d keys decided in turn: every decision admitted (a limit far above the demand), or most denied (a limit of 1 a second per key, burst 1: keys under attack, where the denials are the load). Redis µs/decision is `INFO commandstats`'s time of the scripts (reset before each benchmark), which includes the commands they call; *admitted* is the share of decisions admitted. Each benchmark ran %d times for %v, the two interleaved; the median, ± the 95%% confidence interval.\n\n",
		baseline, bench.RedisTimeKeys, count, benchtimeFlag())
	p("| load | goroutines | peer | Redis µs/decision | × %s's | admitted | round trips/decision | decisions/s |\n|---|---|---|---|---|---|---|---|\n", baseline)
	for _, deny := range []bool{false, true} {
		for _, g := range redisTimeGoroutines {
			base := rt[redisTimeKey{baseline, g, deny}]
			for _, name := range []string{exactPeer, baseline} {
				s := rt[redisTimeKey{name, g, deny}]
				if s == nil || base == nil {
					continue
				}
				us := summary(s["redis-us/op"])
				p("| %s | %d | %s | %s ± %s | %s | %.4f | %s | %s |\n", denyName(deny), g, e.peer(name), num(us.Center), us.PctRangeString(),
					times(us.Center/median(base["redis-us/op"])), median(s["admitted/op"]), roundTrips(median(s["roundtrips/op"])), rate(median(s["decisions/s"])))
			}
		}
	}
}

// fewUseRatios is, round by round, lease mode's decisions/s over exact
// mode's in bench.FewUse with uses uses of each key.
func fewUseRatios(fu map[fewUseKey]decisionSamples, uses int) []float64 {
	l, x := fu[fewUseKey{lease, uses}]["decisions/s"], fu[fewUseKey{exactPeer, uses}]["decisions/s"]
	var r []float64
	for i := range min(len(l), len(x)) {
		r = append(r, l[i]/x[i])
	}
	return r
}

// timesName says how many times each key is used.
func timesName(uses int) string {
	switch uses {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", uses)
}

// writeFewUse renders keys used a few times (bench.FewUse).
func writeFewUse(p func(string, ...any), e env, fu map[fewUseKey]decisionSamples, count int) {
	if len(fu) == 0 {
		return
	}
	p("\n### Keys used once or a few times\n\n")
	p("%d goroutines of one process decide on keys used once each (per-IP limits under a crawl, where every key is new), twice or %d times, one use after another, under a limit of 5 a second (burst 5) that admits every decision: lease mode against exact mode. What each sends when closed (lease mode gives back what a key's lease did not use) counts in its round trips and Redis time. Each benchmark ran %d times for %v, the two interleaved; the median, ± the 95%% confidence interval; *× exact* is the median of the rounds' ratios, in brackets the lowest and highest.\n\n",
		bench.FewUseGoroutines, fewUseCounts[len(fewUseCounts)-1], count, benchtimeFlag())
	p("| uses | peer | decisions/s | × exact | round trips/decision | Redis µs/decision | B/op | allocs/op |\n|---|---|---|---|---|---|---|---|\n")
	for _, uses := range fewUseCounts {
		for _, name := range []string{lease, exactPeer} {
			s := fu[fewUseKey{name, uses}]
			if s == nil {
				continue
			}
			ratio := "1.00×"
			if name == lease {
				ratio = ratioSpread(fewUseRatios(fu, uses))
			}
			d := summary(s["decisions/s"])
			p("| %d | %s | %s ± %s | %s | %s | %.3g | %.0f | %.0f |\n", uses, e.peer(name), rate(d.Center), d.PctRangeString(), ratio,
				roundTrips(median(s["roundtrips/op"])), median(s["redis-us/op"]), median(s["B/op"]), median(s["allocs/op"]))
		}
	}
}

// writeFewUseGoals renders the goal rows of keys used a few times: lease
// mode's decisions/s at least exact mode's in every round.
func writeFewUseGoals(p func(string, ...any), e env, fu map[fewUseKey]decisionSamples) {
	for _, uses := range fewUseCounts {
		r := fewUseRatios(fu, uses)
		if len(r) == 0 {
			continue
		}
		p("| keys used %s, %d goroutines: decisions/s ≥ exact mode's in every round | %s | %s |\n", timesName(uses), bench.FewUseGoroutines,
			e.mark(ratioSpread(r)), yes(slices.Min(r) >= 1))
	}
}

// writeRedisTimeGoals renders the goal rows of exact mode's Redis time: at
// most 0.8 of the baseline's, by the medians.
func writeRedisTimeGoals(p func(string, ...any), e env, rt map[redisTimeKey]decisionSamples) {
	for _, deny := range []bool{false, true} {
		for _, g := range redisTimeGoroutines {
			x, r := rt[redisTimeKey{exactPeer, g, deny}], rt[redisTimeKey{baseline, g, deny}]
			if x == nil || r == nil {
				continue
			}
			ratio := median(x["redis-us/op"]) / median(r["redis-us/op"])
			p("| exact mode's Redis µs per decision ≤ 0.8 × %s's: %s, %s | %s | %s |\n", baseline, denyName(deny), loadName(g),
				e.mark(fmt.Sprintf("%.2f× (%.2f µs against %.2f)", ratio, median(x["redis-us/op"]), median(r["redis-us/op"]))), yes(ratio <= 0.8))
		}
	}
}
