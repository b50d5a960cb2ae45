// Command llmtokens limits the tokens a language model spends per user per
// minute, where a request's cost is known only once the model has answered.
//
// Run it from the repository root:
//
//	go run ./examples/llmtokens                       # embedded in-memory Redis
//	go run ./examples/llmtokens -redis 127.0.0.1:6379 # your Redis
//
// Each request is admitted on an estimate (the prompt's tokens and the most
// the answer may take, max_tokens), then settled with the answer's real
// count against the Result that admitted it (Limiter.Settle): the tokens
// the answer did not use go back, to the minute that admitted them only,
// and an answer longer than the estimate (a model that ignores max_tokens,
// tool output) is charged all the same, past the limit if need be: the user is then in debt, and denied until the refill has paid it
// off. The model here is a stand-in that answers with a made-up number of
// tokens; the transcript shows each step and the user's tokens left.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
)

func main() {
	addr := flag.String("redis", "", "Redis address (host:port); empty starts an embedded in-memory Redis")
	perMinute := flag.Int("tokens", 2000, "tokens per user per minute")
	requests := flag.Int("requests", 8, "requests to send")
	flag.Parse()
	if err := run(os.Stdout, *addr, *perMinute, *requests); err != nil {
		log.Fatal(err)
	}
}

// maxTokens is the most an answer may take, as the request asks the model.
const maxTokens = 400

func run(w io.Writer, addr string, perMinute, requests int) error {
	if perMinute < maxTokens+100 || requests < 1 {
		return fmt.Errorf("need -tokens >= %d and -requests >= 1", maxTokens+100)
	}
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer client.Close()
	// Exact mode: one Redis call a decision, which a model's answer
	// outweighs by far, and every instance sees a user's debt at once.
	l, err := ratelease.New(client, ratelease.WithExact(), ratelease.WithRedisTimeout(time.Second))
	if err != nil {
		return err
	}
	defer l.Close()
	tokens, err := ratelease.NewPolicy("llm-tokens", ratelease.PerMinute(perMinute))
	if err != nil {
		return err
	}
	user := fmt.Sprintf("user-%d", time.Now().UnixNano()) // a fresh key on a shared Redis
	fmt.Fprintf(w, "limit: %d tokens per user per minute (a token bucket); answers of at most %d tokens\n\n", perMinute, maxTokens)

	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 1; i <= requests; i++ {
		prompt := 50 + rng.IntN(250)
		res, err := complete(ctx, l, tokens, user, prompt, rng)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "request %d: %s\n", i, res)
	}
	return nil
}

// complete admits a request of prompt tokens on its estimate, asks the
// model, and settles the cost with the answer's tokens. It says what
// happened.
func complete(ctx context.Context, l *ratelease.Limiter, tokens *ratelease.Policy, user string, prompt int, rng *rand.Rand) (string, error) {
	estimate := prompt + maxTokens
	res, err := l.AllowN(ctx, tokens, user, estimate)
	if err != nil {
		return "", err
	}
	if !res.Allowed {
		return fmt.Sprintf("prompt %d, estimate %d: denied (429), retry in %v", prompt, estimate, res.RetryAfter.Round(time.Millisecond)), nil
	}
	answer := model(rng)
	used := prompt + answer
	settled, err := l.Settle(ctx, tokens, user, res, used)
	if err != nil {
		return "", err
	}
	switch {
	case used < estimate:
		left, err := l.Peek(ctx, tokens, user)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("prompt %d, estimate %d: admitted; answer %d, %d tokens back: %d left",
			prompt, estimate, answer, estimate-used, left.Remaining), nil
	case used > estimate:
		res := settled // the excess's charge
		if res.Debt > 0 {
			return fmt.Sprintf("prompt %d, estimate %d: admitted; answer %d, %d tokens more: in debt by %d, next token in %v",
				prompt, estimate, answer, used-estimate, res.Debt, res.RetryAfter.Round(time.Millisecond)), nil
		}
		return fmt.Sprintf("prompt %d, estimate %d: admitted; answer %d, %d tokens more: %d left",
			prompt, estimate, answer, used-estimate, res.Remaining), nil
	}
	return fmt.Sprintf("prompt %d, estimate %d: admitted; answer %d, as estimated", prompt, estimate, answer), nil
}

// model stands in for a language model: the tokens of its answer, mostly
// within maxTokens, one answer in three far past it.
func model(rng *rand.Rand) int {
	if rng.IntN(3) == 0 {
		return maxTokens + 200 + rng.IntN(1200)
	}
	return 20 + rng.IntN(maxTokens-20)
}
