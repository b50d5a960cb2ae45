package bench

import (
	"context"
	"os"
	"testing"
)

func TestZZAccuracy(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	for _, p := range Peers() {
		if p.Name != "ratelease-lease" {
			continue
		}
		for _, burst := range []int{200, 2000} {
			for range 3 {
				cfg := DefaultAccuracy
				cfg.Burst = burst
				res, err := Accuracy(context.Background(), p, addr, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("burst %d: admitted %v accuracy %.3f rt/dec %.4f", burst, res.Admitted, res.Accuracy(), res.RoundTripsPerDecision())
			}
		}
	}
}
