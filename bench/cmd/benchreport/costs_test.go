package main

import (
	"fmt"
	"strings"
	"testing"
)

// render runs w with a printf into a string.
func render(w func(p func(string, ...any))) string {
	var b strings.Builder
	w(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	return b.String()
}

// The few-use goal holds only when lease mode made at least exact mode's
// decisions/s in every round, compared round by round (the rounds ran
// interleaved), not by the medians: one round short fails it.
func TestFewUseGoalsRoundByRound(t *testing.T) {
	e := env{src: tree{commit: "8f39020b7759"}}
	fu := map[fewUseKey]decisionSamples{
		{lease, 1}:     {"decisions/s": {110, 100, 130}},
		{exactPeer, 1}: {"decisions/s": {100, 100, 100}},
		{lease, 2}:     {"decisions/s": {120, 90, 130}}, // its median beats exact's, one round does not
		{exactPeer, 2}: {"decisions/s": {100, 100, 100}},
		{lease, 4}:     {"decisions/s": {200, 200, 200}}, // each round against its own exact one
		{exactPeer, 4}: {"decisions/s": {100, 250, 100}},
	}
	got := render(func(p func(string, ...any)) { writeFewUseGoals(p, e, fu) })
	for _, want := range []string{
		"| keys used once, 16 goroutines: decisions/s ≥ exact mode's in every round | 1.10× [1.00×, 1.30×] | yes |\n",
		"| keys used twice, 16 goroutines: decisions/s ≥ exact mode's in every round | 1.20× [0.90×, 1.30×] | **no** |\n",
		"| keys used 4 times, 16 goroutines: decisions/s ≥ exact mode's in every round | 2.00× [0.80×, 2.00×] | **no** |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the goal rows lack\n%s\ngot\n%s", want, got)
		}
	}
	section := render(func(p func(string, ...any)) { writeFewUse(p, e, fu, 3) })
	if !strings.Contains(section, "| 2 | ratelease-lease | ") || !strings.Contains(section, "1.20× [0.90×, 1.30×]") {
		t.Errorf("the few-use table lacks lease mode's row of 2 uses with its rounds' ratios:\n%s", section)
	}
	if render(func(p func(string, ...any)) { writeFewUseGoals(p, e, nil) }) != "" {
		t.Error("goal rows without results")
	}
}

// Exact mode's Redis time goal compares the medians with 0.8 of the
// baseline's, for each load and goroutine count measured.
func TestRedisTimeGoals(t *testing.T) {
	e := env{src: tree{commit: "8f39020b7759"}}
	rt := map[redisTimeKey]decisionSamples{
		{exactPeer, 1, false}: {"redis-us/op": {7, 8, 9}},
		{baseline, 1, false}:  {"redis-us/op": {10, 10, 10}},
		{exactPeer, 8, true}:  {"redis-us/op": {9, 9, 9}},
		{baseline, 8, true}:   {"redis-us/op": {10, 10, 10}},
	}
	got := render(func(p func(string, ...any)) { writeRedisTimeGoals(p, e, rt) })
	for _, want := range []string{
		"| exact mode's Redis µs per decision ≤ 0.8 × redis_rate's: admitting, sequential | 0.80× (8.00 µs against 10.00) | yes |\n",
		"| exact mode's Redis µs per decision ≤ 0.8 × redis_rate's: denying, 8 goroutines | 0.90× (9.00 µs against 10.00) | **no** |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the goal rows lack\n%s\ngot\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 2 {
		t.Errorf("%d goal rows for 2 measured cells:\n%s", n, got)
	}
}
