package httplimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP returns a KeyFunc that keys requests by the client's IP address.
//
// The address is the connection's (RemoteAddr), unless the connection comes
// from one of the trusted proxies: then it is the rightmost address of
// X-Forwarded-For that is not a trusted proxy (each proxy appends the
// address it got the request from, so addresses to the left of the last
// untrusted one may be forged), or X-Real-IP when there is no
// X-Forwarded-For. With no trusted proxies, and by default, those headers
// are never read. A header that cannot be parsed is not used.
//
// An IPv4 address is its own key. An IPv6 address is keyed by its /64
// prefix ("2001:db8:1:2::/64"): one subscriber gets a whole /64, and keying
// each address would give them billions of keys.
//
// ClientIP is ClientAddr and IPKey applied to the request; a RemoteAddr
// that is not an IP address (a Unix socket, say) is the key as it is.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	return func(r *http.Request) string {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return r.RemoteAddr // not an IP (a Unix socket, say): the peer as it is
		}
		return IPKey(ClientAddr(ip, r.Header.Values, trusted...))
	}
}

// ClientAddr returns the address of the client of a request that came
// over a connection from peer, as ClientIP finds it; it is the part of
// ClientIP that does not depend on net/http, for other protocols (grpclimit
// gives it a gRPC peer's address and the call's metadata).
//
// The client is peer itself, unless peer is one of the trusted proxies:
// then it is the rightmost address of X-Forwarded-For that is not a
// trusted proxy (each proxy appends the address it got the request from,
// so addresses to the left of the last untrusted one may be forged; when
// every address is a trusted proxy, the leftmost), or X-Real-IP when there
// is no X-Forwarded-For. With no trusted proxies, or a peer that is not
// one, header is not called. An address that cannot be parsed is not used:
// parsing X-Forwarded-For stops at the first such address from the right,
// keeping the last good one. Zones are dropped and IPv4-mapped IPv6
// addresses are returned as IPv4, of peer and of the headers alike; the
// zero netip.Addr, a peer with no address, is returned as it is.
//
// header returns the values of a request header field, in order, by its
// name: "X-Forwarded-For" (whose values are joined by commas into one
// list) and "X-Real-IP" (whose first value is used). It must match names
// without regard to case, as http.Header.Values and metadata.MD.Get do.
func ClientAddr(peer netip.Addr, header func(name string) []string, trusted ...netip.Prefix) netip.Addr {
	ip := normalIP(peer)
	if !isTrusted(ip, trusted) {
		return ip
	}
	if xff := header("X-Forwarded-For"); len(xff) > 0 {
		hops := strings.Split(strings.Join(xff, ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := parseIP(strings.TrimSpace(hops[i]))
			if err != nil {
				break // forged or broken: keep the last good hop
			}
			ip = hop
			if !isTrusted(hop, trusted) {
				break
			}
		}
		return ip
	}
	if xr := header("X-Real-IP"); len(xr) > 0 {
		if real, err := parseIP(strings.TrimSpace(xr[0])); err == nil {
			return real
		}
	}
	return ip
}

// IPKey returns the key of a client's address, as ClientIP keys it: an
// IPv4 address is its own key ("192.0.2.1"), an IPv6 address is keyed by
// its /64 prefix ("2001:db8:1:2::/64"), an IPv4-mapped IPv6 address as
// IPv4, without its zone. The zero netip.Addr, which is no address, has
// the empty key, with which a dimension does not apply.
func IPKey(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	ip = normalIP(ip)
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// isTrusted reports whether ip is in one of the prefixes trusted.
func isTrusted(ip netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// parseIP parses an address without its zone, IPv4-mapped IPv6 as IPv4.
func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return ip, err
	}
	return normalIP(ip), nil
}

// normalIP is ip without its zone, IPv4-mapped IPv6 as IPv4.
func normalIP(ip netip.Addr) netip.Addr { return ip.WithZone("").Unmap() }
