package door

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/remote"
)

// A call to one master of a Redis Cluster is ended by a failed dial to
// that master only, not to another; a call to any server (node "") by
// any. The dial's error is the call's, in place of the end it caused; an
// error of the call's own stays. (No call is made: nothing is dialed.)
func TestCallEndsOnItsServersDial(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	d := New(Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: time.Minute})
	refused := errors.New("dial tcp 10.0.0.1:7000: connect: connection refused")

	one := d.begin(context.Background(), "10.0.0.1:7000")
	defer one.end()
	one.DialFailed("10.0.0.2:7000", errors.New("another master's"))
	if one.Err() != nil || one.dialed(context.Canceled) != context.Canceled {
		t.Fatalf("ended by another master's dial: %v", one.Err())
	}
	one.DialFailed("10.0.0.1:7000", refused)
	one.DialFailed("10.0.0.1:7000", errors.New("a later one"))
	if one.Err() == nil || one.dialed(context.Canceled) != refused || one.dialed(context.DeadlineExceeded) != refused {
		t.Fatalf("its master's dial: %v, %v; want it ended, with the first refusal", one.Err(), one.dialed(context.Canceled))
	}
	own := errors.New("NOPERM")
	if one.dialed(own) != own || one.dialed(nil) != nil {
		t.Fatal("an error of the call's own, or none, replaced")
	}

	anyServer := d.begin(context.Background(), "")
	defer anyServer.end()
	anyServer.DialFailed("10.0.0.2:7000", refused)
	if anyServer.Err() == nil || anyServer.dialed(context.Canceled) != refused {
		t.Fatal("a call to any server not ended by a failed dial")
	}
}
