package apicheck

import (
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	got, err := List("testdata/p")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg p, const A = 1",
		"pkg p, const C int64 = 1 << 40",
		"pkg p, const K0 K = iota + 1 (iota = 0)",
		"pkg p, const K2 K = iota + 1 (iota = 2)",
		"pkg p, func (*T) M(x int) string",
		"pkg p, func (G[K]) GM() K",
		"pkg p, func F(a, b int, opts ...string) (int, error)",
		"pkg p, type Alias = T",
		"pkg p, type G[K comparable] struct",
		"pkg p, type G[K comparable] struct, K K",
		"pkg p, type I interface",
		"pkg p, type I interface, M(int) string",
		"pkg p, type K uint8",
		"pkg p, type T struct",
		"pkg p, type T struct, X int",
		"pkg p, type T struct, Z func(a int) error",
		"pkg p, type T struct, embedded time.Duration",
		"pkg p, var V = time.Second",
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("got:\n%s\nwant:\n%s", g, w)
	}
}
