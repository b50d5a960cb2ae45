package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo runs on the embedded Redis: a request is admitted on its
// estimate and settled both ways, and a user in debt is denied.
func TestLLMTokensRuns(t *testing.T) {
	var out strings.Builder
	if err := run(&out, "", 2000, 12); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tokens back", "in debt by", "denied (429)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the transcript has no %q:\n%s", want, out.String())
		}
	}
	if err := run(&out, "", 10, 1); err == nil {
		t.Fatal("run accepted a limit below one request's estimate")
	}
}
