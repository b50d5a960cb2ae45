package grpclimit

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/ratelease/ratelease"
)

// HeaderStyle is a set of rate-limit metadata styles: the fields of
// httplimit's headers, sent as gRPC response metadata (an admitted call's
// header metadata, a denied call's trailer metadata: see WithHeaders),
// with the same names in lowercase and the same values.
type HeaderStyle uint8

// The header styles. Combine them with |.
const (
	// DraftHeaders are ratelimit-policy and ratelimit, the fields of
	// draft-ietf-httpapi-ratelimit-headers-11, as httplimit sends them.
	// ratelimit-policy lists every limit of every dimension that applies
	// to the call (the same on every response to one client, denials
	// included), as `"name";q=quota;w=window-seconds`; ratelimit has one
	// member per dimension decided, for its deciding limit, as
	// `"name";r=remaining;t=seconds`, t being the seconds until more quota
	// is made available: on a denial, retry-after; when admitted, until the
	// next unit comes back (0 at full quota; for a fixed window, its end;
	// for the sliding algorithms an estimate, as if their units came back
	// evenly). A policy with one limit is named by its name; a limit of a
	// policy with several is named by the policy's name and its period
	// ("api-1s", "api-1m").
	DraftHeaders HeaderStyle = 1 << iota
	// XRateLimitHeaders are x-ratelimit-limit (the deciding limit's Rate),
	// x-ratelimit-remaining and x-ratelimit-reset (in Unix seconds: when
	// the limit is fully replenished, and on a denial when retry-after
	// ends), for the most restrictive dimension.
	XRateLimitHeaders

	// NoHeaders sends no rate-limit metadata (a denial still carries
	// retry-after, grpc-retry-pushback-ms and its status details).
	NoHeaders HeaderStyle = 0
	// AllHeaders sends every style; the default.
	AllHeaders = DraftHeaders | XRateLimitHeaders
)

// The metadata keys, lowercase as gRPC requires.
const (
	mdPolicy     = "ratelimit-policy"
	mdRateLimit  = "ratelimit"
	mdLimit      = "x-ratelimit-limit"
	mdRemaining  = "x-ratelimit-remaining"
	mdReset      = "x-ratelimit-reset"
	mdRetryAfter = "retry-after"
	// mdPushback is the trailer by which a server tells gRPC's own retry
	// policy (a service config's retryPolicy) when to retry, in
	// milliseconds (gRFC A6).
	mdPushback = "grpc-retry-pushback-ms"
)

// describe computes d's identifiers and RateLimit-Policy members, once,
// as httplimit does.
func (d *dimension) describe() {
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
		d.ids = append(d.ids, name)
		d.names = append(d.names, sfString(name))
		d.rates = append(d.rates, strconv.Itoa(l.Rate))
		if i > 0 {
			d.policyHeader += ", "
		}
		d.policyHeader += sfString(name) + ";q=" + strconv.FormatInt(quota, 10) + ";w=" + strconv.FormatInt(window, 10)
	}
}

// index returns the index of limit l in d's policy.
func (d *dimension) index(l ratelease.Limit) int {
	for i, pl := range d.limits {
		if pl == l {
			return i
		}
	}
	return 0
}

// write adds the metadata of styles for the decisions ds, of which
// tightest is the most restrictive, to md.
func (s HeaderStyle) write(md metadata.MD, as []applies, ds []decision, tightest decision) {
	if s&DraftHeaders != 0 {
		policy := as[0].dim.policyHeader
		if len(as) > 1 {
			var b strings.Builder
			for i, d := range as {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(d.dim.policyHeader)
			}
			policy = b.String()
		}
		var buf [256]byte
		b := buf[:0]
		for i, d := range ds {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, d.dim.names[d.dim.index(d.res.Limit)]...)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, int64(max(0, d.res.Remaining)), 10)
			b = append(b, ";t="...)
			if d.res.Allowed {
				b = appendSeconds(b, moreIn(d.res), 0)
			} else {
				b = appendSeconds(b, d.res.RetryAfter, 1) // as retry-after
			}
		}
		md[mdPolicy] = []string{policy}
		md[mdRateLimit] = []string{string(b)}
	}
	if s&XRateLimitHeaders != 0 {
		res := tightest.res
		reset := res.ResetAfter
		if !res.Allowed {
			reset = max(time.Second, res.RetryAfter) // as retry-after
		}
		md[mdLimit] = []string{tightest.dim.rates[tightest.dim.index(res.Limit)]}
		md[mdRemaining] = []string{strconv.Itoa(max(0, res.Remaining))}
		md[mdReset] = []string{strconv.FormatInt(time.Now().Add(reset+time.Second-1).Unix(), 10)}
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
