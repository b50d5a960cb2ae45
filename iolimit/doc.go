// Package iolimit limits the bytes that flow through an io.Reader or an
// io.Writer under a ratelease policy, for one key: a global
// bytes-per-second limit per tenant, shared by every process that uses the
// same Redis, is one line.
//
//	bw, _ := ratelease.NewPolicy("bandwidth", ratelease.Limit{Rate: 10 << 20, Period: time.Second}) // 10 MiB/s
//	lr, err := iolimit.NewReader(ctx, upload, limiter, bw, tenant)
//	n, err := io.Copy(dst, lr) // at most 10 MiB/s, with every other stream of tenant's key
//
// A unit of the policy is a byte. Bytes are charged before they move, with
// Limiter.WaitN, in chunks: a Writer charges each chunk of what it is given
// before writing it; a Reader, before it reads, charges the caller's
// buffer, up to a chunk (unless it still holds bytes charged earlier, which
// it reads first). A chunk is never more than the policy's capacity
// (Policy.Capacity, its smallest burst), so that WaitN can always admit it,
// and by default it is what the policy's tightest limit allows in a tenth
// of a second (ChunkTime; at least MinChunk, 1 KiB, where the capacity
// allows). So a stream of large buffers flat out at its limit makes about
// ten decisions a second whatever the rate, and a 1 GB/s limit never
// charges a byte at a time: a Writer given 1 GB writes it in ten chunks of
// 100 MB, a Reader charges what each read asks for, up to 100 MB. DefaultChunk says what a
// policy gets; WithChunk sets it. In lease mode, the Limiter's default, most
// of those decisions are answered from memory, without a Redis call.
//
// What was charged and did not move is given back with Limiter.Refund:
//
//   - a Writer whose underlying writer writes less than a chunk (an error,
//     or a short write: io.ErrShortWrite) refunds the rest of the chunk at
//     once;
//   - a Reader whose underlying reader returns fewer bytes than were
//     charged keeps the rest for its next reads (a network connection
//     often returns less than asked, and a refund per read would be a
//     Redis call per read), and refunds what it still holds when a read
//     fails or ends (io.EOF included), when its context is done, and at
//     Close.
//
// So bytes moved never exceed bytes charged, and over a whole stream they
// are equal (a refund Redis cannot take is dropped: those bytes stay
// spent). A Reader left without Close before its end holds at most one
// chunk. The read that finds the end of a stream is charged like any other
// (a Reader cannot know it is the end before it reads) and its chunk
// refunded: under a binding limit, the end is seen up to one chunk's time
// (ChunkTime by default) late.
//
// The context given to NewReader or NewWriter governs the whole stream:
// once it is done, the next Read or Write returns its error, unwrapped (as
// does a WaitN it ends), and a deadline that would pass before the next
// chunk could be admitted ends the stream at once with
// context.DeadlineExceeded (WaitN's rule). A read or write already in the
// underlying stream is not interrupted: that is the stream's own business.
// Refunds are made with the context's values but without its cancellation.
//
// Bad input is an error at construction, matched with errors.Is:
// ErrNoContext, ErrNoReader, ErrNoWriter, ErrNoLimiter, ErrNoPolicy,
// ratelease.ErrInvalidKey (an empty key, or one longer than
// ratelease.MaxKeyLen), ErrInvalidChunk. Errors of the Limiter (ErrClosed,
// ErrUnavailable under FailClosed) end the read or write that met them.
//
// A Reader or Writer is for one goroutine at a time, as most streams are;
// any number of them, in any number of processes, may share a key. The
// package imports the root package's public API and the standard library.
package iolimit
