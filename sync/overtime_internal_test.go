package sync

import (
	"context"
	"testing"
	"time"
)

// A wait that gives up checks for the call's end first: a select that
// finds the call ended and the wait's end ready together may pick either,
// and an answer that came must not be taken for none.
func TestWaitForSeesAnEndThatCameWithItsLimit(t *testing.T) {
	done := make(chan struct{})
	close(done)
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	for range 64 { // a select picking at random would miss it about 32 times
		if !waitFor(done, parent, time.Now()) {
			t.Fatal("waitFor reported no answer, though the call had ended")
		}
	}
}
