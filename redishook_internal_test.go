package ratelease

import (
	"testing"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// The exported constants show their values in godoc; these hold them to
// the internal ones they stand for.
func TestExportedConstantsMatchTheirInternals(t *testing.T) {
	for op, want := range map[RedisOp]door.Op{
		RedisDecide: door.OpDecide, RedisLease: door.OpLease, RedisRefund: door.OpRefund,
		RedisCharge: door.OpCharge, RedisPeek: door.OpPeek, RedisReset: door.OpReset,
		RedisBlock: door.OpBlock, RedisUnblock: door.OpUnblock, RedisPing: door.OpPing,
		RedisConfig: door.OpConfig,
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
