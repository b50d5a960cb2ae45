package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo runs end to end on the embedded Redis, in both modes, and stays
// within the limit's bound (run exits the process otherwise).
func TestQuickstartRuns(t *testing.T) {
	for _, exact := range []bool{false, true} {
		if err := run("", 2, 2, 50, time.Second, exact); err != nil {
			t.Fatal(err)
		}
	}
	if err := run("", 0, 2, 50, time.Second, false); err == nil {
		t.Fatal("run accepted zero instances")
	}
}
