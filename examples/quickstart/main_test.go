package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo runs end to end on the embedded Redis and stays within the
// limit's bound (run exits the process otherwise).
func TestQuickstartRuns(t *testing.T) {
	if err := run("", 2, 2, 50, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := run("", 0, 2, 50, time.Second); err == nil {
		t.Fatal("run accepted zero instances")
	}
}
