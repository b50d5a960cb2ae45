package remote

import "time"

// Test access, for package remote_test, to what no importer uses.

// LimitCapacity is l's capacity: the most units one request can be granted.
func LimitCapacity(l Limit) int64 { return l.capacity() }

// ValidateLimit reports why the scripts cannot enforce l exactly.
func ValidateLimit(l Limit) error { return l.validate() }

// CalendarBounds returns the start and end of c's window holding t.
func CalendarBounds(c Calendar, t time.Time) (s, e time.Time) { return c.window(t) }
