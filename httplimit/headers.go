package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelease/ratelease"
)

// HeaderStyle is a set of rate-limit header styles.
type HeaderStyle uint8

// The header styles. Combine them with |.
const (
	// DraftHeaders are RateLimit-Policy and RateLimit, as in
	// draft-ietf-httpapi-ratelimit-headers-11. RateLimit-Policy lists every
	// limit of every dimension that applies to the request (the same on
	// every response to one client, denials included), as
	// `"name";q=quota;w=window-seconds`; RateLimit has one member per
	// dimension decided, for its deciding limit, as
	// `"name";r=remaining;t=seconds`, t being the seconds until more quota
	// is made available: on a denial, Retry-After; when admitted, until
	// the next unit comes back (0 at full quota; for a fixed window, its
	// end; for the sliding algorithms an estimate, as if their units came
	// back evenly). A policy with one limit is named by its name; a limit
	// of a policy with several is named by the policy's name and its
	// period ("api-1s", "api-1m").
	DraftHeaders HeaderStyle = 1 << iota
	// XRateLimitHeaders are X-RateLimit-Limit (the deciding limit's Rate),
	// X-RateLimit-Remaining and X-RateLimit-Reset (in Unix seconds, as
	// GitHub and ulule/limiter send it: when the limit is fully
	// replenished, and on a denial when Retry-After ends, so that a client
	// waiting for it waits no longer than it must), for the most
	// restrictive dimension.
	XRateLimitHeaders

	// NoHeaders sends no rate-limit header (Retry-After still goes with
	// every 429).
	NoHeaders HeaderStyle = 0
	// AllHeaders sends every style; the default.
	AllHeaders = DraftHeaders | XRateLimitHeaders
)

// Dimension is a policy as the rate-limit header fields tell of it: the
// names of its limits, their Rates, and its RateLimit-Policy members,
// computed once, by NewDimension, for every response under the policy.
// The middleware keeps one for each of its dimensions (its own policy and
// each WithDimension's); code that limits requests of another protocol
// keeps its own and gets the fields, with the same values as the
// middleware's headers, from HeaderStyle.Fields (grpclimit sends them as
// gRPC metadata).
//
// A Dimension is never changed once made: it is safe for concurrent use.
// The zero Dimension has no policy and no limits: its names and members
// are empty.
type Dimension struct {
	policy *ratelease.Policy
	limits []ratelease.Limit
	// ids are the limits' names, names the same as Structured Field
	// strings, rates their Rates formatted, and member their
	// RateLimit-Policy members.
	ids, names, rates []string
	member            string
}

// NewDimension describes policy p for the rate-limit header fields. A nil
// p is ErrNoPolicy.
func NewDimension(p *ratelease.Policy) (*Dimension, error) {
	if p == nil {
		return nil, ErrNoPolicy
	}
	d := &Dimension{policy: p}
	d.describe()
	return d, nil
}

// describe computes d's names and RateLimit-Policy members from its policy,
// once; a Dimension with no policy stays empty.
func (d *Dimension) describe() {
	if d.policy == nil {
		return
	}
	limits := d.policy.Limits()
	d.limits = limits
	seen := map[string]bool{}
	for i, l := range limits {
		name := d.policy.Name()
		if len(limits) > 1 {
			label := periodLabel(l.Period)
			if l.Algorithm == ratelease.CalendarWindow {
				label = string(l.Calendar.Unit)
			}
			name += "-" + label
			if seen[name] {
				name += "-" + strconv.Itoa(i)
			}
			seen[name] = true
		}
		window := max(1, int64((l.Period+time.Second/2)/time.Second))
		quota := int64(l.Rate) * window * int64(time.Second) / int64(l.Period)
		d.ids = append(d.ids, name)
		d.names = append(d.names, sfString(name))
		d.rates = append(d.rates, strconv.Itoa(l.Rate))
		if i > 0 {
			d.member += ", "
		}
		d.member += sfString(name) + ";q=" + strconv.FormatInt(quota, 10) + ";w=" + strconv.FormatInt(window, 10)
	}
}

// Policy returns the policy that d describes; nil for the zero Dimension.
func (d *Dimension) Policy() *ratelease.Policy {
	if d == nil {
		return nil
	}
	return d.policy
}

// LimitName returns the name of limit l of d's policy in the draft fields
// (unquoted): the policy's name, or for a policy of several limits its
// name and the limit's period ("api-1s", "api-1m"; "api-1m-2" for a second
// limit of one period). A Limit that is not one of the policy's gets the
// first limit's name; the zero Dimension's names are all empty.
func (d *Dimension) LimitName(l ratelease.Limit) string {
	if d == nil {
		return ""
	}
	return pick(d.limits, d.ids, l)
}

// name returns limit l's name as a Structured Field string, and rate its
// Rate formatted; "" for a nil d.
func (d *Dimension) name(l ratelease.Limit) string {
	if d == nil {
		return ""
	}
	return pick(d.limits, d.names, l)
}

func (d *Dimension) rate(l ratelease.Limit) string {
	if d == nil {
		return ""
	}
	return pick(d.limits, d.rates, l)
}

// policyMember returns d's RateLimit-Policy members; "" for a nil d.
func (d *Dimension) policyMember() string {
	if d == nil {
		return ""
	}
	return d.member
}

// pick returns the entry of list (a per-limit list of a Dimension) for
// limit l of limits: the first entry when l is not one of them, "" when
// there are none.
func pick(limits []ratelease.Limit, list []string, l ratelease.Limit) string {
	for i, pl := range limits {
		if pl == l {
			return list[i]
		}
	}
	if len(list) == 0 {
		return ""
	}
	return list[0]
}

// Decision is what one dimension decided for a request: Key is the
// request's key under the Dimension's policy, and Result the decision.
type Decision struct {
	Dimension *Dimension
	Key       string
	Result    ratelease.Result
}

// Tightest returns the most restrictive of the decisions ds, made as the
// middleware makes them (in order, until one denies): the one that
// denied, or else the one with the fewest units Remaining, the first of
// equals. That decision fills the X-RateLimit fields and Retry-After. It
// returns the zero Decision when ds is empty.
func Tightest(ds []Decision) Decision {
	if len(ds) == 0 {
		return Decision{}
	}
	tightest := ds[0]
	for _, d := range ds[1:] {
		if !d.Result.Allowed || d.Result.Remaining < tightest.Result.Remaining {
			tightest = d
		}
	}
	return tightest
}

// Fields are the values of the rate-limit header fields of one response,
// as HeaderStyle.Fields computes them. A field of a style that was not
// asked for is empty.
type Fields struct {
	// Policy is RateLimit-Policy, and RateLimit is RateLimit
	// (DraftHeaders).
	Policy, RateLimit string
	// Limit, Remaining and Reset are X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (XRateLimitHeaders).
	Limit, Remaining, Reset string
	// RetryAfter is Retry-After, in whole seconds, rounded up, at least 1,
	// when a decision denied, whatever the styles; empty when all
	// admitted.
	RetryAfter string
}

// Fields computes the rate-limit header fields of styles s for a request,
// with the values that the middleware sends in its headers (see the
// styles): applying are the dimensions that apply to the request (all of
// them named in RateLimit-Policy), in the order they are decided in, and
// decided the decisions made, in the same order: one for each of the
// first dimensions of applying, up to and including the first that
// denied. X-RateLimit-Reset is in Unix seconds counted from now. With no
// decision there are no fields.
//
// The middleware sends the fields as HTTP headers; grpclimit sends them
// as gRPC metadata, under the same names in lowercase.
func (s HeaderStyle) Fields(applying []*Dimension, decided []Decision, now time.Time) Fields {
	var f Fields
	if len(decided) == 0 {
		return f
	}
	tightest := Tightest(decided)
	if !tightest.Result.Allowed {
		f.RetryAfter = seconds(tightest.Result.RetryAfter, 1)
	}
	var buf [256]byte
	if s&DraftHeaders != 0 {
		switch len(applying) {
		case 0:
		case 1:
			f.Policy = applying[0].policyMember()
		default:
			b := buf[:0]
			for i, d := range applying {
				if i > 0 {
					b = append(b, ", "...)
				}
				b = append(b, d.policyMember()...)
			}
			f.Policy = string(b)
		}
		b := buf[:0]
		for i, d := range decided {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, d.Dimension.name(d.Result.Limit)...)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, int64(max(0, d.Result.Remaining)), 10)
			b = append(b, ";t="...)
			if d.Result.Allowed {
				b = appendSeconds(b, moreIn(d.Result), 0)
			} else {
				b = appendSeconds(b, d.Result.RetryAfter, 1) // as Retry-After
			}
		}
		f.RateLimit = string(b)
	}
	if s&XRateLimitHeaders != 0 {
		res := tightest.Result
		b := strconv.AppendInt(buf[:0], int64(max(0, res.Remaining)), 10)
		n := len(b)
		reset := res.ResetAfter
		if !res.Allowed {
			reset = max(time.Second, res.RetryAfter) // as Retry-After
		}
		b = strconv.AppendInt(b, now.Add(reset+time.Second-1).Unix(), 10)
		f.Limit = tightest.Dimension.rate(res.Limit)
		f.Remaining, f.Reset = string(b[:n]), string(b[n:])
	}
	return f
}

// The headers' canonical keys, so that setting them neither canonicalizes
// nor allocates.
var (
	hdrPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit  = http.CanonicalHeaderKey("RateLimit")
	hdrLimit      = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrRemaining  = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrReset      = http.CanonicalHeaderKey("X-RateLimit-Reset")
	hdrRetryAfter = http.CanonicalHeaderKey("Retry-After")
)

// write sets the headers of f, those of styles s and Retry-After when f
// has it. All values share one slice.
func (s HeaderStyle) write(h http.Header, f *Fields) {
	n := 0
	if s&DraftHeaders != 0 {
		n += 2
	}
	if s&XRateLimitHeaders != 0 {
		n += 3
	}
	if f.RetryAfter != "" {
		n++
	}
	if n == 0 {
		return
	}
	vals := make([]string, 0, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if s&DraftHeaders != 0 {
		set(hdrPolicy, f.Policy)
		set(hdrRateLimit, f.RateLimit)
	}
	if s&XRateLimitHeaders != 0 {
		set(hdrLimit, f.Limit)
		set(hdrRemaining, f.Remaining)
		set(hdrReset, f.Reset)
	}
	if f.RetryAfter != "" {
		set(hdrRetryAfter, f.RetryAfter)
	}
}

// moreIn is how long until more quota is made available after res, which
// admitted: none at full quota; a fixed window's end; otherwise until the
// next unit comes back, units coming back every Period/Rate (exact for the
// buckets, an estimate for the sliding algorithms), the last of the
// missing ones at ResetAfter.
func moreIn(res ratelease.Result) time.Duration {
	l := res.Limit
	missing := int64(l.Burst) - int64(res.Remaining)
	switch {
	case missing <= 0 || l.Rate <= 0:
		return 0
	case l.Algorithm == ratelease.FixedWindow || l.Algorithm == ratelease.CalendarWindow:
		return res.ResetAfter
	}
	unit := l.Period / time.Duration(l.Rate)
	return max(0, res.ResetAfter-time.Duration(missing-1)*unit)
}

// appendSeconds appends d in whole seconds, rounded up, at least least.
func appendSeconds(b []byte, d time.Duration, least int64) []byte {
	return strconv.AppendInt(b, max(least, int64((d+time.Second-1)/time.Second)), 10)
}

// seconds formats d in whole seconds, rounded up, at least least.
func seconds(d time.Duration, least int64) string {
	var buf [20]byte
	return string(appendSeconds(buf[:0], d, least))
}

// periodLabel names a period: "1s", "1m", "1h", "250ms".
func periodLabel(p time.Duration) string {
	switch {
	case p%time.Hour == 0:
		return strconv.FormatInt(int64(p/time.Hour), 10) + "h"
	case p%time.Minute == 0:
		return strconv.FormatInt(int64(p/time.Minute), 10) + "m"
	case p%time.Second == 0:
		return strconv.FormatInt(int64(p/time.Second), 10) + "s"
	}
	return strconv.FormatInt(p.Milliseconds(), 10) + "ms"
}

// sfString quotes s as a Structured Field string (RFC 9651): printable
// ASCII only, with '"' and '\' escaped; any other byte becomes '_'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
