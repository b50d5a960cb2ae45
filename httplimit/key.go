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
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	trust := func(ip netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) string {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		ip, err := parseIP(host)
		if err != nil {
			return r.RemoteAddr // not an IP (a Unix socket, say): the peer as it is
		}
		if len(trusted) == 0 || !trust(ip) {
			return ipKey(ip)
		}
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			hops := strings.Split(strings.Join(xff, ","), ",")
			for i := len(hops) - 1; i >= 0; i-- {
				hop, err := parseIP(strings.TrimSpace(hops[i]))
				if err != nil {
					break // forged or broken: keep the last good hop
				}
				ip = hop
				if !trust(hop) {
					break
				}
			}
			return ipKey(ip)
		}
		if real, err := parseIP(strings.TrimSpace(r.Header.Get("X-Real-IP"))); err == nil {
			return ipKey(real)
		}
		return ipKey(ip)
	}
}

// parseIP parses an address without its zone, IPv4-mapped IPv6 as IPv4.
func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return ip, err
	}
	return ip.WithZone("").Unmap(), nil
}

// ipKey is the key of ip: itself for IPv4, its /64 for IPv6.
func ipKey(ip netip.Addr) string {
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}
