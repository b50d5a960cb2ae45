package ratelease

import "time"

// ReceiptAt returns the time by Redis's clock that r names, for tests.
func ReceiptAt(r Receipt) time.Time { return time.UnixMicro(r.at) }
