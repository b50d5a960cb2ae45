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

// describe computes d's identifiers and RateLimit-Policy members, once.
func (d *dimension) describe() {
	if d.policy == nil {
		return
	}
	limits := d.policy.Limits()
	d.limits = limits
	seen := map[string]bool{}
	for i, l := range limits {
		name := d.policy.Name()
		if len(limits) > 1 {
			name += "-" + periodLabel(l.Period)
			if seen[name] {
				name += "-" + strconv.Itoa(i)
			}
			seen[name] = true
		}
		window := max(1, int64((l.Period+time.Second/2)/time.Second))
		quota := int64(l.Rate) * window * int64(time.Second) / int64(l.Period)
		d.names = append(d.names, sfString(name))
		d.rates = append(d.rates, strconv.Itoa(l.Rate))
		if i > 0 {
			d.policyHeader += ", "
		}
		d.policyHeader += sfString(name) + ";q=" + strconv.FormatInt(quota, 10) + ";w=" + strconv.FormatInt(window, 10)
	}
}

// name returns the identifier of limit l of d's policy.
func (d *dimension) name(l ratelease.Limit) string { return d.names[d.index(l)] }

// rate returns limit l's Rate, formatted.
func (d *dimension) rate(l ratelease.Limit) string { return d.rates[d.index(l)] }

// index returns the index of limit l in d's policy.
func (d *dimension) index(l ratelease.Limit) int {
	for i, pl := range d.limits {
		if pl == l {
			return i
		}
	}
	return 0
}

// The headers' canonical keys, so that setting them neither canonicalizes
// nor allocates.
var (
	hdrPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit = http.CanonicalHeaderKey("RateLimit")
	hdrLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	hdrRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	hdrReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// write sets the headers of styles for the decisions ds, of which tightest
// is the most restrictive. All values share one slice, and each is built
// in one buffer.
func (s HeaderStyle) write(h http.Header, as []applies, ds []decision, tightest decision) {
	if s == NoHeaders {
		return
	}
	vals := make([]string, 5)
	var buf [256]byte
	if s&DraftHeaders != 0 {
		policy := as[0].dim.policyHeader
		if len(as) > 1 {
			b := buf[:0]
			for i, d := range as {
				if i > 0 {
					b = append(b, ", "...)
				}
				b = append(b, d.dim.policyHeader...)
			}
			policy = string(b)
		}
		b := buf[:0]
		for i, d := range ds {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, d.dim.name(d.res.Limit)...)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, int64(max(0, d.res.Remaining)), 10)
			b = append(b, ";t="...)
			if d.res.Allowed {
				b = appendSeconds(b, moreIn(d.res), 0)
			} else {
				b = appendSeconds(b, d.res.RetryAfter, 1) // as Retry-After
			}
		}
		vals[0], vals[1] = policy, string(b)
		h[hdrPolicy], h[hdrRateLimit] = vals[0:1:1], vals[1:2:2]
	}
	if s&XRateLimitHeaders != 0 {
		res := tightest.res
		b := strconv.AppendInt(buf[:0], int64(max(0, res.Remaining)), 10)
		n := len(b)
		reset := res.ResetAfter
		if !res.Allowed {
			reset = max(time.Second, res.RetryAfter) // as Retry-After
		}
		b = strconv.AppendInt(b, time.Now().Add(reset+time.Second-1).Unix(), 10)
		vals[2], vals[3], vals[4] = tightest.dim.rate(res.Limit), string(b[:n]), string(b[n:])
		h[hdrLimit], h[hdrRemaining], h[hdrReset] = vals[2:3:3], vals[3:4:4], vals[4:5:5]
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
	case l.Algorithm == ratelease.FixedWindow:
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
