package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratelease/ratelease/httplimit"
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
// empty key means that the call has none under the policy (an anonymous
// call under a per-API-key policy, say): WithMissingKey says what then
// happens; by default (PassMissingKey) the policy does not apply to the
// call.
type KeyFunc func(ctx context.Context, c Call) string

// Metadata returns a KeyFunc that keys calls by the first value of the
// named incoming metadata key (an API key, say; the name is matched without
// regard to case, as gRPC lowercases metadata keys). A call without it
// has no key under that dimension: see WithMissingKey. A value longer
// than ratelease.MaxKeyLen is an error (ratelease.ErrInvalidKey:
// codes.InvalidArgument with the default error handler).
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
// peer at all (which a gRPC server always sets) has no key (see
// WithMissingKey).
//
// The address is found by httplimit.ClientAddr, and keyed by
// httplimit.IPKey, from the peer's address and the incoming metadata, so
// that both packages find and key clients alike.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	return func(ctx context.Context, _ Call) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		ip, ok := peerIP(p.Addr)
		if !ok {
			return p.Addr.String() // not an IP (a Unix socket, say): the peer as it is
		}
		// The incoming metadata, read only if ClientAddr asks (from a
		// trusted peer): a copy of all of it is made on the first read.
		var md metadata.MD
		read := false
		header := func(name string) []string {
			if !read {
				md, _ = metadata.FromIncomingContext(ctx)
				read = true
			}
			return md.Get(name)
		}
		return httplimit.IPKey(httplimit.ClientAddr(ip, header, trusted...))
	}
}

// peerIP returns the IP address of a peer's address, if it has one.
func peerIP(a net.Addr) (netip.Addr, bool) {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return netip.AddrFromSlice(tcp.IP)
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		host = a.String()
	}
	ip, err := netip.ParseAddr(host)
	return ip, err == nil
}
