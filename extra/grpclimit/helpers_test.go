package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/grpclimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// modes are the Limiter modes every behaviour is checked in.
var modes = []struct {
	name string
	opts []ratelease.Option
}{
	{"exact", []ratelease.Option{ratelease.WithExact()}},
	{"lease", nil},
}

// epoch is the time a frozen miniredis shows.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// startMini starts a miniredis, closed when t ends. Its clock stands still
// at epoch, so that no limit refills during a test, unless live: then it
// shows the real time.
func startMini(t testing.TB, live bool) *miniredis.Miniredis {
	t.Helper()
	mr := miniredis.RunT(t)
	if !live {
		mr.SetTime(epoch)
	}
	return mr
}

// limiterOn returns a Limiter on the Redis at addr, closed when t ends.
func limiterOn(t testing.TB, addr string, opts ...ratelease.Option) *ratelease.Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	l, err := ratelease.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newLimiter returns a Limiter on a frozen miniredis; a generous Redis
// timeout keeps a loaded machine from sending calls to the failure mode.
func newLimiter(t testing.TB, opts ...ratelease.Option) *ratelease.Limiter {
	t.Helper()
	return limiterOn(t, startMini(t, false).Addr(), append([]ratelease.Option{ratelease.WithRedisTimeout(2 * time.Second)}, opts...)...)
}

func newPolicy(t testing.TB, name string, limits ...ratelease.Limit) *ratelease.Policy {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newInterceptor(t testing.TB, l *ratelease.Limiter, p *ratelease.Policy, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	i, err := grpclimit.New(l, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// echoMethod is the one method of the test.Echo service, a service that is
// not the health service, for the per-method policies.
const echoMethod = "/test.Echo/Echo"

// echoDesc describes test.Echo by hand (no protoc): its Echo takes and
// returns the health messages, so that the proto codec serves it.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(healthpb.HealthCheckRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) {
				srv.(*echo).calls.Add(1)
				return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
			}
			if interceptor == nil {
				return h(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}, h)
		},
	}},
}

// echo implements test.Echo; calls counts the calls its handler ran.
type echo struct{ calls atomic.Int64 }

// server is a real gRPC server on a free loopback port, with the health
// service and test.Echo, and a client connection to it.
type server struct {
	addr   string
	conn   *grpc.ClientConn
	health healthpb.HealthClient
	echo   *echo
}

// call calls test.Echo.
func (s *server) call(ctx context.Context, opts ...grpc.CallOption) error {
	return echoOn(ctx, s.conn, opts...)
}

// serve starts a server with opts (the Interceptor's ServerOptions, say)
// and dials it with dial; both are stopped when t ends.
func serve(t testing.TB, opts []grpc.ServerOption, dial ...grpc.DialOption) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	for _, name := range []string{"1", "2", "3", "4", "5", "11"} { // services named by cost
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(srv, hs)
	e := &echo{}
	srv.RegisterService(&echoDesc, e)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		hs.Shutdown()
		srv.Stop()
		<-done
	})
	return &server{addr: lis.Addr().String(), conn: conn, health: healthpb.NewHealthClient(conn), echo: e}
}

// dial returns another client connection to s, closed when t ends.
func (s *server) dial(t testing.TB, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+s.addr,
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// echoOn calls test.Echo through conn.
func echoOn(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
	return conn.Invoke(ctx, echoMethod, &healthpb.HealthCheckRequest{}, new(healthpb.HealthCheckResponse), opts...)
}

// ctxFor returns a context for one call, ended when t ends.
func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
