package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo stops and restarts its Redis and ends cleanly.
func TestOutageRuns(t *testing.T) {
	if err := run(20, time.Second, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := run(0, time.Second, time.Second); err == nil {
		t.Fatal("run accepted a zero rate")
	}
}
