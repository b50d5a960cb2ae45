// Package redistest starts real redis-server processes for tests.
//
// Each server listens on a free port of 127.0.0.1 with persistence off, is
// owned by the test that started it, and is stopped by its PID when that
// test ends; nothing here touches a server it did not start, or port 6379.
// When redis-server is not installed, Start skips the test, unless the
// environment sets RATELEASE_REQUIRE_REDIS=1 (as CI does), where it fails.
//
// Besides servers (Start, StartCluster, StartSentinel, StartMini, and a
// Proxy to put faults between a client and a server), it has what tests
// and benchmarks measure Redis work with: Trips counts a client's round
// trips and commands, InfoField reads a figure of INFO, ScriptStats the
// scripts' µs and calls, and BenchAddr gives a benchmark its Redis.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server
// into a test failure.
const RequireEnv = "RATELEASE_REQUIRE_REDIS"

// Server is a redis-server process started by Start. Its methods that
// kill, restart, pause and resume it act on the process Start made, by PID,
// and on nothing else; they are for one goroutine at a time.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr   string
	bin    string
	dir    string
	port   int
	conf   string   // a config file, passed first (a Sentinel needs one)
	args   []string // more redis-server arguments
	cmd    *exec.Cmd
	exited chan error // receives cmd.Wait's result once the process is gone
}

// Start runs redis-server on a free loopback port and returns once it
// answers PING. The server is killed, by PID, when t ends.
func Start(t testing.TB) *Server { return startWith(t) }

// startWith is Start with more redis-server arguments.
func startWith(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := Launch(lookPath(t, "redis-server"), t.TempDir(), args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// Launch is Start for programs without a testing.TB (a benchmark's
// TestMain, a measuring tool): it runs bin (a redis-server) on a free
// loopback port, with dir for its files and args as more arguments, and
// returns once it answers PING. The caller stops it with Kill.
func Launch(bin, dir string, args ...string) (*Server, error) {
	return launch(bin, dir, "", args)
}

// launch is Launch with a config file (conf, when not empty).
func launch(bin, dir, conf string, args []string) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, dir: dir, port: port, conf: conf, args: args}
		if lastErr = s.run(); lastErr == nil {
			return s, nil
		}
		// most likely the port was taken between probe and bind
	}
	return nil, fmt.Errorf("could not start redis-server: %w", lastErr)
}

// lookPath finds a Redis program, or skips t (fails it when RequireEnv is
// set).
func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s not found and %s=1: %v", name, RequireEnv, err)
		}
		t.Skipf("%s not found (set %s=1 to fail instead): %v", name, RequireEnv, err)
	}
	return bin
}

// run starts the process on s's port and waits until it answers PING.
func (s *Server) run() error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf) // redis-server takes its config file first
	}
	args = append(args, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "yes", "--loglevel", "warning")
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.exited = cmd, make(chan error, 1)
	go func() { s.exited <- cmd.Wait() }()
	var err error
	port := s.port
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-s.exited:
			s.exited <- err // for stop
			return fmt.Errorf("redis-server on port %d exited: %v", port, err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop()
	return fmt.Errorf("redis-server on port %d did not answer PING within 10s: %v", port, err)
}

// stop kills the process started for s, by its PID, and waits until it has
// exited and been reaped. Idempotent.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // SIGKILL ends a paused process too
	<-s.exited
	s.cmd = nil
}

// Kill kills the server (SIGKILL, by PID) and waits until it is gone: a
// crash. Its data is lost (persistence is off).
func (s *Server) Kill() { s.stop() }

// Restart kills the server if it runs and starts a new, empty one on the
// same port, returning once it answers PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger a moment
		if err = s.run(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redistest: restart on %s: %v", s.Addr, err)
}

// Pause stops the server with SIGSTOP: it keeps its connections open and
// answers nothing, the hardest failure for a client. Resume ends it.
func (s *Server) Pause(t testing.TB) { s.signal(t, syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(t testing.TB) { s.signal(t, syscall.SIGCONT) }

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if s.cmd == nil {
		t.Fatal("redistest: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %v to pid %d: %v", sig, s.cmd.Process.Pid, err)
	}
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
