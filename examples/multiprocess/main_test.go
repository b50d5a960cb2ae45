package main

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs the child when the test binary is started as one (the
// parent starts its own executable, which under go test is this binary).
func TestMain(m *testing.M) {
	if n := os.Getenv(childEnv); n != "" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// Real processes share one embedded Redis, and their total stays within
// the bound (runParent fails otherwise).
func TestProcessesShareTheLimit(t *testing.T) {
	if err := runParent(3, 100, time.Second, ""); err != nil {
		t.Fatal(err)
	}
	if err := runParent(0, 100, time.Second, ""); err == nil {
		t.Fatal("runParent accepted zero processes")
	}
}
