package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Call is what a KeyFunc, a cost function and an error handler know of a
// call, besides its context (which holds the call's incoming metadata,
// metadata.FromIncomingContext, and its peer, peer.FromContext).
type Call struct {
	// FullMethod is the method called, "/package.Service/Method".
	FullMethod string
	// Request is a unary call's request message. It is nil for a stream,
	// which is decided when it opens, before any message.
	Request any
}

// KeyFunc returns the key that a call is limited by under one policy. An
// empty key means that the policy does not apply to the call (an anonymous
// call under a per-API-key policy, say).
type KeyFunc func(ctx context.Context, c Call) string

// Metadata returns a KeyFunc that keys calls by the first value of the
// named incoming metadata key (an API key, say; the name is matched without
// regard to case, as gRPC lowercases metadata keys). A call without it is
// not limited by that dimension. A value longer than ratelease.MaxKeyLen
// is an error (ratelease.ErrInvalidKey: codes.InvalidArgument with the
// default error handler).
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ Call) string {
		if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
}

// FullMethod returns a KeyFunc that keys calls by the method called
// ("/package.Service/Method"): one budget per method, shared by every
// client, to protect a backend that the method uses.
func FullMethod() KeyFunc {
	return func(_ context.Context, c Call) string { return c.FullMethod }
}

// ClientIP returns a KeyFunc that keys calls by the client's IP address,
// as httplimit.ClientIP does for HTTP.
//
// The address is the peer's (peer.FromContext: the connection's remote
// address), unless the peer is one of the trusted proxies: then it is the
// rightmost address of the x-forwarded-for metadata that is not a trusted
// proxy (each proxy appends the address it got the call from, so
// addresses to the left of the last untrusted one may be forged), or
// x-real-ip when there is no x-forwarded-for. With no trusted proxies, and
// by default, that metadata is never read. A value that cannot be parsed
// is not used.
//
// An IPv4 address is its own key. An IPv6 address is keyed by its /64
// prefix ("2001:db8:1:2::/64"): one subscriber gets a whole /64, and keying
// each address would give them billions of keys. A peer that is not an IP
// (a Unix socket, say) is keyed by its address as it is; a call with no
// peer at all (which a gRPC server always sets) is not limited by the
// dimension.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	trust := func(ip netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	return func(ctx context.Context, _ Call) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		ip, ok := peerIP(p.Addr)
		if !ok {
			return p.Addr.String() // not an IP (a Unix socket, say): the peer as it is
		}
		if len(trusted) == 0 || !trust(ip) {
			return ipKey(ip)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		if xff := md.Get("x-forwarded-for"); len(xff) > 0 {
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
		if xr := md.Get("x-real-ip"); len(xr) > 0 {
			if real, err := parseIP(strings.TrimSpace(xr[0])); err == nil {
				return ipKey(real)
			}
		}
		return ipKey(ip)
	}
}

// peerIP returns the IP address of a peer's address, if it has one.
func peerIP(a net.Addr) (netip.Addr, bool) {
	if tcp, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(tcp.IP)
		return ip.Unmap(), ok
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		host = a.String()
	}
	ip, err := parseIP(host)
	return ip, err == nil
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
