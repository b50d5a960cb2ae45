package ratelease

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/tier"
)

// The root's vocabulary (Source, FailureMode, BreakerState, Stats,
// PolicyStats) is its own, converted from the engine's at the boundary by
// value: the two must agree constant for constant, method for method and
// field for field, or a conversion would mean something else.
func TestVocabularyAgrees(t *testing.T) {
	t.Run("constants", func(t *testing.T) {
		pairs := []struct {
			name         string
			root, tier   any
			rootN, tierN int64
		}{
			{"SourceLocal", SourceLocal, tier.SourceLocal, int64(SourceLocal), int64(tier.SourceLocal)},
			{"SourceRemote", SourceRemote, tier.SourceRemote, int64(SourceRemote), int64(tier.SourceRemote)},
			{"SourceFallback", SourceFallback, tier.SourceFallback, int64(SourceFallback), int64(tier.SourceFallback)},
			{"SourceCached", SourceCached, tier.SourceCached, int64(SourceCached), int64(tier.SourceCached)},
			{"SourceBusy", SourceBusy, tier.SourceBusy, int64(SourceBusy), int64(tier.SourceBusy)},
			{"FailLocal", FailLocal, tier.FailLocal, int64(FailLocal), int64(tier.FailLocal)},
			{"FailOpen", FailOpen, tier.FailOpen, int64(FailOpen), int64(tier.FailOpen)},
			{"FailClosed", FailClosed, tier.FailClosed, int64(FailClosed), int64(tier.FailClosed)},
		}
		for _, p := range pairs {
			if p.rootN != p.tierN || fmt.Sprint(p.root) != fmt.Sprint(p.tier) {
				t.Errorf("%s: root %d (%v), tier %d (%v)", p.name, p.rootN, p.root, p.tierN, p.tier)
			}
		}
		// Every value, named or not, reads the same: a constant added to
		// tier alone shows here (the root would say "none" or "unknown").
		for v := range 256 {
			a, _ := Source(v).MarshalText()
			b, _ := tier.Source(v).MarshalText()
			if Source(v).String() != tier.Source(v).String() || string(a) != string(b) {
				t.Errorf("Source(%d): root %v %q, tier %v %q", v, Source(v), a, tier.Source(v), b)
			}
			if FailureMode(v).String() != tier.FailureMode(v).String() {
				t.Errorf("FailureMode(%d): root %v, tier %v", v, FailureMode(v), tier.FailureMode(v))
			}
		}
		// The words: each of the door's states and kinds has the root's
		// constant for its word, and no other value has a word.
		states := map[door.BreakerState]BreakerState{
			door.BreakerClosed: BreakerClosed, door.BreakerOpen: BreakerOpen, door.BreakerHalfOpen: BreakerHalfOpen}
		for v := door.BreakerState(-4); v < 256; v++ {
			if got, want := breakerState(v), states[v]; want != "" && got != want || want == "" && got != "unknown" {
				t.Errorf("the door's breaker state %d is %q for the root, want %q", v, got, want)
			}
		}
		kinds := map[door.EventKind]EventKind{
			door.EventFirstFailure: EventFirstFailure, door.EventBreaker: EventBreaker, door.EventWarning: EventWarning}
		for v := range door.EventKind(255) {
			var got EventKind
			events(func(e Event) { got = e.Kind })(door.Event{Kind: v})
			if want := kinds[v]; want != "" && got != want || want == "" && got != "unknown" {
				t.Errorf("the door's event kind %d is %q for the root, want %q", v, got, want)
			}
		}
	})
	t.Run("types", func(t *testing.T) {
		for _, p := range [][2]reflect.Type{
			{reflect.TypeFor[Source](), reflect.TypeFor[tier.Source]()},
			{reflect.TypeFor[FailureMode](), reflect.TypeFor[tier.FailureMode]()},
			{reflect.TypeFor[Stats](), reflect.TypeFor[tier.Stats]()},
			{reflect.TypeFor[PolicyStats](), reflect.TypeFor[tier.PolicyStats]()},
		} {
			root, eng := p[0], p[1]
			if root.PkgPath() != "github.com/ratelease/ratelease" {
				t.Errorf("%v is defined in %s, not in the root package", root, root.PkgPath())
			}
			if a, b := methods(root), methods(eng); a != b {
				t.Errorf("%v has methods %s, %v has %s", root, a, eng, b)
			}
			if a, b := shape(root), shape(eng); a != b {
				t.Errorf("%v is %s, %v is %s", root, a, eng, b)
			}
		}
	})
	// events converts every field of an event.
	t.Run("event", func(t *testing.T) {
		cause := errors.New("OOM command not allowed")
		in := door.Event{Kind: door.EventBreaker, Breaker: door.BreakerOpen, Err: cause, Node: "10.0.0.1:6379"}
		var out Event
		events(func(ev Event) { out = ev })(in)
		if out != (Event{Kind: EventBreaker, Breaker: BreakerOpen, Err: cause, Node: "10.0.0.1:6379"}) ||
			fmt.Sprintf("%+v", out) != fmt.Sprintf("%+v", in) {
			t.Errorf("events(%+v) = %+v", in, out)
		}
		// An event's cause that is one of the engine's sentinels matches
		// the root's.
		in.Kind, in.Breaker, in.Err = door.EventWarning, door.BreakerClosed, fmt.Errorf("%w: maxmemory-policy allkeys-lru", door.ErrEvictionPolicy)
		events(func(ev Event) { out = ev })(in)
		if !errors.Is(out.Err, ErrEvictionPolicy) || !errors.Is(out.Err, door.ErrEvictionPolicy) || out.Err.Error() != in.Err.Error() {
			t.Errorf("events(%+v): Err %v, want one matching ErrEvictionPolicy, saying the same", in, out.Err)
		}
	})
	// The root's sentinels for the engine's say what the engine's say: a
	// user sees the same message whichever is returned.
	t.Run("errors", func(t *testing.T) {
		for _, s := range engineSentinels {
			if s.root == s.engine || s.root.Error() != s.engine.Error() {
				t.Errorf("root sentinel %q (%p), engine's %q (%p): want two errors of one message", s.root, s.root, s.engine, s.engine)
			}
		}
	})
	// statsOf copies every field: each of a tier.Stats set to a value of
	// its own reads the same from the root's.
	t.Run("stats", func(t *testing.T) {
		var s tier.Stats
		fill(reflect.ValueOf(&s).Elem(), 1)
		st := statsOf(s)
		rv, tv := reflect.ValueOf(st), reflect.ValueOf(s)
		for i := range tv.NumField() {
			name := tv.Type().Field(i).Name
			if a, b := fmt.Sprint(rv.FieldByName(name)), fmt.Sprint(tv.Field(i)); a != b {
				t.Errorf("Stats.%s: %s, tier's %s", name, a, b)
			}
		}
		if fmt.Sprintf("%+v", st) != fmt.Sprintf("%+v", s) {
			t.Errorf("Stats %+v\ntier.Stats %+v", st, s)
		}
		if s := statsOf(tier.Stats{}); s.Policies != nil {
			t.Errorf("no policies converted to %v", s.Policies)
		}
	})
}

// methods lists the exported methods of t and *t.
func methods(t reflect.Type) string {
	var names []string
	for _, t := range []reflect.Type{t, reflect.PointerTo(t)} {
		for i := range t.NumMethod() {
			names = append(names, t.Method(i).Name)
		}
	}
	return fmt.Sprint(names)
}

// shape describes t without its package: its kind, and a struct's fields,
// in order, with their shapes; a named field type by its name.
func shape(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		s := "struct{"
		for i := range t.NumField() {
			f := t.Field(i)
			s += f.Name + " " + fieldShape(f.Type) + "; "
		}
		return s + "}"
	case reflect.Map:
		return "map[" + fieldShape(t.Key()) + "]" + fieldShape(t.Elem())
	}
	return t.Kind().String()
}

// fieldShape is shape, naming a named type with its kind (a breaker state
// by its name alone: the root's is a word, the door's a number).
func fieldShape(t reflect.Type) string {
	if t.Name() == "BreakerState" {
		return t.Name()
	}
	if t.Name() != "" && t.PkgPath() != "" {
		return t.Name() + "(" + shape(t) + ")"
	}
	return shape(t)
}

// fill sets every number in v to one of its own, from next on, and a map
// to one entry; it returns the next number.
func fill(v reflect.Value, next int64) int64 {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			next = fill(v.Field(i), next)
		}
	case reflect.Map:
		e := reflect.New(v.Type().Elem()).Elem()
		next = fill(e, next)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.ValueOf("p"), e)
	case reflect.Uint64:
		v.SetUint(uint64(next))
		next++
	case reflect.Int64:
		v.SetInt(next)
		next++
	case reflect.Int32:
		v.SetInt(next % 3) // a breaker state
		next++
	default:
		panic("fill: " + v.Type().String())
	}
	return next
}
