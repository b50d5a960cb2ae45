// Package redistest starts real redis-server processes for tests.
//
// Each server listens on a free port of 127.0.0.1 with persistence off, is
// owned by the test that started it, and is stopped by its PID when that
// test ends; nothing here touches a server it did not start, or port 6379.
// When redis-server is not installed, Start skips the test, unless the
// environment sets RATELEASE_REQUIRE_REDIS=1 (as CI does), where it fails.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server
// into a test failure.
const RequireEnv = "RATELEASE_REQUIRE_REDIS"

// Server is a redis-server process started by Start.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr   string
	cmd    *exec.Cmd
	exited chan error // receives cmd.Wait's result once the process is gone
}

// Start runs redis-server on a free loopback port and returns once it
// answers PING. The server is killed, by PID, when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server not found and %s=1: %v", RequireEnv, err)
		}
		t.Skipf("redis-server not found (set %s=1 to fail instead): %v", RequireEnv, err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(bin, t.TempDir())
		if err == nil {
			t.Cleanup(s.stop)
			return s
		}
		lastErr = err // most likely the port was taken between probe and bind
	}
	t.Fatalf("redistest: could not start redis-server: %v", lastErr)
	return nil
}

func start(bin, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "yes", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-s.exited:
			return nil, fmt.Errorf("redis-server on port %d exited: %v", port, err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10s: %v", port, err)
}

// stop kills the process started for s, by its PID, and waits until it has
// exited and been reaped.
func (s *Server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Client returns a go-redis client for s, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
