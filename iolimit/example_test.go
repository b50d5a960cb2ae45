package iolimit_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/iolimit"
	"github.com/ratelease/ratelease/ratetest"
)

// A tenant's uploads share 1 MiB a minute, on every replica: each upload
// is read through a Reader of the tenant's key, and what it read is
// charged.
func ExampleNewReader() {
	// The Limiter of ratetest's Env, on an in-memory Redis, stands in for
	// yours here: ratelease.New(redisClient).
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	limiter := env.Limiter()
	ctx := context.Background()
	uploads, _ := ratelease.NewPolicy("uploads", ratelease.PerMinute(1<<20))

	upload := strings.NewReader(strings.Repeat("x", 300<<10)) // 300 KiB
	r, err := iolimit.NewReader(ctx, upload, limiter, uploads, "tenant:7")
	if err != nil {
		log.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	fmt.Println("copied", n, "bytes,", err)

	left, _ := limiter.Peek(ctx, uploads, "tenant:7")
	fmt.Println(left.Remaining, "bytes left for tenant:7")
	// Output:
	// copied 307200 bytes, <nil>
	// 741376 bytes left for tenant:7
}

// A Writer writes what the limit admits now and, when its context's
// deadline would pass before the next chunk is admitted, stops at once
// with context.DeadlineExceeded rather than sleep until the deadline.
func ExampleNewWriter() {
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	tiny, _ := ratelease.NewPolicy("tiny", ratelease.PerHour(5)) // 5 bytes an hour
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	var out bytes.Buffer
	w, err := iolimit.NewWriter(ctx, &out, env.Limiter(), tiny, "k")
	if err != nil {
		log.Fatal(err)
	}
	n, err := w.Write([]byte("hello, world"))
	fmt.Printf("wrote %d bytes, %q: %v\n", n, out.String(), err)
	// Output:
	// wrote 5 bytes, "hello": context deadline exceeded
}

// Bad input is an error at construction.
func ExampleNewReader_errors() {
	_, err := iolimit.NewReader(context.Background(), strings.NewReader("x"), nil, nil, "k")
	fmt.Println(err)
	// Output:
	// iolimit: nil Limiter
}

// DefaultChunk is what a Reader or Writer charges at most at a time: a
// tenth of a second of the limit, within its burst.
func ExampleDefaultChunk() {
	gbps, _ := ratelease.NewPolicy("gbps", ratelease.PerSecond(1_000_000_000))
	mibps, _ := ratelease.NewPolicy("mibps", ratelease.Limit{Rate: 1 << 20, Period: time.Second, Burst: 64 << 10})
	fmt.Println(iolimit.DefaultChunk(gbps), iolimit.DefaultChunk(mibps))
	// Output:
	// 100000000 65536
}
