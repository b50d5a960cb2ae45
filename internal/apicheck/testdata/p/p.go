// Package p is apicheck's test input: every kind of declaration, exported
// and not.
package p

import "time"

// Exported and unexported constants, a typed one, a group.
const (
	A       = 1
	b       = 2
	C int64 = 1 << 40
)

// V is a variable.
var V, w = time.Second, 3

// K is an enum.
type K uint8

// The Ks.
const (
	K0 K = iota + 1
	k1
	K2
)

// T is a struct with exported, unexported and embedded fields.
type T struct {
	X, y int
	Z    func(a int) error
	time.Duration
	u
}

type u struct{}

// I is an interface.
type I interface {
	M(int) string
	m()
}

// Alias is an alias.
type Alias = T

// G is generic.
type G[K comparable] struct{ K K }

// F is a function.
func F(a, b int, opts ...string) (int, error) { return 0, nil }

// M is a method of an exported type; N of an unexported one.
func (t *T) M(x int) string { return "" }

func (u) N() {}

// GM is a method of a generic type.
func (g G[K]) GM() K { return g.K }
