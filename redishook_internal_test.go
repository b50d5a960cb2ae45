package ratelease

import (
	"testing"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// The exported constants show their values in godoc; these hold them to
// the internal ones they stand for.
func TestExportedConstantsMatchTheirInternals(t *testing.T) {
	for op, want := range map[RedisOp]door.RedisOp{
		RedisDecide: door.RedisDecide, RedisLease: door.RedisLease, RedisRefund: door.RedisRefund,
		RedisCharge: door.RedisCharge, RedisPeek: door.RedisPeek, RedisReset: door.RedisReset,
		RedisBlock: door.RedisBlock, RedisUnblock: door.RedisUnblock, RedisPing: door.RedisPing,
		RedisConfig: door.RedisConfig,
	} {
		if uint8(op) != uint8(want) {
			t.Errorf("%v is %d, the door's op %d", op, op, want)
		}
	}
	if MaxKeyLen != remote.MaxKeyLen {
		t.Errorf("MaxKeyLen %d, remote's %d", MaxKeyLen, remote.MaxKeyLen)
	}
	if MaxLogUnits != remote.MaxLogUnits {
		t.Errorf("MaxLogUnits %d, remote's %d", MaxLogUnits, remote.MaxLogUnits)
	}
	if MaxPolicyNameLen != remote.MaxNameLen {
		t.Errorf("MaxPolicyNameLen %d, remote's MaxNameLen %d", MaxPolicyNameLen, remote.MaxNameLen)
	}
}
