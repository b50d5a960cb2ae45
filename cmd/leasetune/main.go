// Command leasetune helps choose ratelease's lease settings: for a limit,
// a number of instances and a demand profile it runs the real engine
// (ratelease.Limiter instances sharing one Redis) under each combination
// of lease size (LeaseConfig.Refresh, which sizes a lease at a key's
// observed demand) and TTL, prints what each costs and gives up, recommends
// one, and draws the trade-off curves.
//
// By default it runs on an embedded miniredis with simulated time, so a
// sweep of minutes of traffic takes seconds and every run sees the same
// demand. With -redis it runs on that Redis, in real time.
//
//	cd cmd/leasetune && go run . -rate 1000 -instances 4 -profile bursty -plot leasing.svg
//
// For each configuration it reports:
//
//   - Redis calls/s: round trips of all instances (leases and refunds).
//   - overshoot: the most any window (1ms to twice the period) admitted past
//     the exact bound Burst + Rate·w; the guarantee allows Rate·TTL.
//   - stranded: units leased that lapsed unused (they go back to Redis, but
//     were held from other instances meanwhile).
//   - served: admitted ÷ what an exact token bucket admits of the same
//     demand; below 1 is demand denied because units sat elsewhere.
//   - p99: a decision's wall time at the 99th percentile (on miniredis, a
//     decision that waited on Redis shows as tens of µs).
//
// The recommendation is, among the configurations within -max-overshoot,
// -min-served and -max-p99, the one with the shortest TTL (the tightest
// guarantee) of those within 5% of the fewest Redis calls.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratelease/ratelease"
)

// errUsage marks bad flags.
var errUsage = errors.New("usage")

// criteria are what a recommended configuration must meet.
type criteria struct {
	MaxOvershoot float64 // units, as a fraction of Burst
	MinServed    float64
	MaxP99       time.Duration
}

func main() {
	s := scenario{Seed: 1}
	var c criteria
	var refreshes, ttls, addr, plotPath string
	var maxLease int
	flag.IntVar(&s.Rate, "rate", 1000, "the limit: requests per period")
	flag.DurationVar(&s.Period, "period", time.Second, "the limit's period")
	flag.IntVar(&s.Burst, "burst", 0, "the bucket's capacity (0: the rate)")
	flag.IntVar(&s.Instances, "instances", 4, "Limiter instances sharing the limit")
	flag.StringVar(&s.Profile, "profile", "steady", "demand profile: "+profileNames())
	flag.Float64Var(&s.Load, "load", 0.8, "the instances' demand together, as a fraction of the rate")
	flag.DurationVar(&s.Duration, "duration", 20*time.Second, "traffic per configuration (simulated time, unless -redis)")
	flag.StringVar(&refreshes, "refresh", "25ms,50ms,100ms,250ms,500ms,1s", "lease sizes to try, as LeaseConfig.Refresh: a lease holds this long of a key's demand")
	flag.StringVar(&ttls, "ttl", "250ms,1s,1500ms,5s", "LeaseConfig.TTL values to try")
	flag.IntVar(&maxLease, "max", ratelease.DefaultLeaseConfig().Max, "LeaseConfig.Max: the most units in one lease (0: no bound)")
	flag.Float64Var(&c.MaxOvershoot, "max-overshoot", 0.1, "recommend only configurations whose worst window went at most this fraction of Burst past Burst + Rate·w")
	flag.Float64Var(&c.MinServed, "min-served", 0.97, "recommend only configurations admitting at least this fraction of what an exact limiter admits")
	flag.DurationVar(&c.MaxP99, "max-p99", time.Millisecond, "recommend only configurations with a p99 decision time at most this")
	flag.StringVar(&addr, "redis", "", "a Redis address to run on, in real time (default: embedded miniredis, simulated time)")
	flag.StringVar(&plotPath, "plot", "leasetune.svg", "where to draw the trade-off curves (.svg or .png; empty: none)")
	flag.Parse()
	if err := tune(os.Stdout, s, c, refreshes, ttls, maxLease, addr, plotPath); err != nil {
		fmt.Fprintln(os.Stderr, "leasetune:", err)
		if errors.Is(err, errUsage) {
			flag.Usage()
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func profileNames() string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%s)", n, profiles[n])
	}
	return b.String()
}

// tune runs the sweep and writes the table, the recommendation and the plot.
func tune(w io.Writer, s scenario, c criteria, refreshes, ttls string, maxLease int, addr, plotPath string) error {
	if s.Burst == 0 {
		s.Burst = s.Rate
	}
	if err := s.validate(); err != nil {
		return err
	}
	rs, err := durations(refreshes)
	if err != nil {
		return fmt.Errorf("%w: -refresh: %w", errUsage, err)
	}
	ts, err := durations(ttls)
	if err != nil {
		return fmt.Errorf("%w: -ttl: %w", errUsage, err)
	}
	if err := plotFormatOK(plotPath); err != nil {
		return err
	}
	newBackend := func() (backend, error) { return newSimulated() }
	where := "embedded miniredis, simulated time"
	if addr != "" {
		newBackend = func() (backend, error) { return &live{addr: addr}, nil }
		where = "Redis at " + addr + ", real time"
	}
	demand := s.demand()
	exact := s.exact(demand)
	fmt.Fprintf(w, "limit %d per %v, burst %d; %d instances; %s demand at %.0f%% of the rate; %v per configuration on %s\n",
		s.Rate, s.Period, s.Burst, s.Instances, s.Profile, s.Load*100, s.Duration, where)
	fmt.Fprintf(w, "an exact token bucket admits %d of %d requests\n\n", sum(exact), sumAll(demand))
	var results []result
	for _, ttl := range ts {
		for _, refresh := range rs {
			if refresh > ttl {
				// Refused by WithLease: units held past TTL only lapse.
				fmt.Fprintf(w, "skipped: Refresh %v > TTL %v\n", refresh, ttl)
				continue
			}
			lc := ratelease.LeaseConfig{Max: maxLease, Refresh: refresh, TTL: ttl}
			b, err := newBackend()
			if err != nil {
				return err
			}
			r, err := run(s, lc, b, demand, exact, fmt.Sprintf("leasetune-%d-%d", os.Getpid(), len(results)))
			b.close()
			if err != nil {
				return fmt.Errorf("refresh %v, TTL %v: %w", refresh, ttl, err)
			}
			results = append(results, r)
		}
	}
	writeTable(w, s, results)
	best, ok := recommend(s, c, results)
	fmt.Fprintln(w)
	if ok {
		fmt.Fprintf(w, "recommended: ratelease.WithLease(ratelease.LeaseConfig{Max: %d, Refresh: %v, TTL: %v})\n",
			best.Lease.Max, best.Lease.Refresh, best.Lease.TTL)
		fmt.Fprintf(w, "  the shortest TTL within 5%% of the fewest Redis calls (%.0f/s) with overshoot ≤ %.0f units, served ≥ %.2f and p99 ≤ %v under this demand;\n",
			best.CallsPerSec, c.MaxOvershoot*float64(s.Burst), c.MinServed, c.MaxP99)
		fmt.Fprintf(w, "  whatever the demand, no window of length w admits more than Burst + Rate·(w + TTL): %.0f units past the exact bound\n",
			best.OvershootBound)
	} else {
		fmt.Fprintf(w, "no configuration met overshoot ≤ %.0f units, served ≥ %.2f and p99 ≤ %v: try other -refresh and -ttl values, or loosen the criteria\n",
			c.MaxOvershoot*float64(s.Burst), c.MinServed, c.MaxP99)
	}
	if plotPath != "" {
		if err := drawPlot(plotPath, s, ts, results); err != nil {
			return err
		}
		fmt.Fprintf(w, "plot: %s\n", plotPath)
	}
	return nil
}

func (s scenario) validate() error {
	switch {
	case s.Rate < 1 || s.Period <= 0 || s.Burst < 1:
		return fmt.Errorf("%w: -rate, -burst and -period must be positive", errUsage)
	case s.Instances < 1:
		return fmt.Errorf("%w: -instances must be at least 1", errUsage)
	case profiles[s.Profile] == "":
		return fmt.Errorf("%w: -profile %q: want %s", errUsage, s.Profile, profileNames())
	case s.Load <= 0:
		return fmt.Errorf("%w: -load must be positive", errUsage)
	case s.Duration < 10*step:
		return fmt.Errorf("%w: -duration must be at least %v", errUsage, 10*step)
	}
	return nil
}

func durations(list string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, f := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if d <= 0 {
			return nil, fmt.Errorf("%v is not positive", d)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func sumAll(d [][]int) int {
	n := 0
	for _, row := range d {
		n += sum(row)
	}
	return n
}

func writeTable(w io.Writer, s scenario, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "refresh\tTTL\tmean lease\tRedis calls/s\tovershoot\t(bound Rate·TTL)\tstranded\tserved\tp99\t")
	for _, r := range results {
		over := "none" // no window reached the exact bound
		if r.Overshoot > 0 {
			over = fmt.Sprintf("%.0f", r.Overshoot)
		}
		fmt.Fprintf(tw, "%v\t%v\t%.1f\t%.1f\t%s\t%.0f\t%d\t%.3f\t%v\t\n", r.Lease.Refresh, r.Lease.TTL, r.MeanLease,
			r.CallsPerSec, over, r.OvershootBound, r.Stranded, r.Served, r.P99.Round(100*time.Nanosecond))
	}
	tw.Flush()
}

// recommend returns, of the results meeting c, the one with the shortest
// TTL (the tightest guarantee) among those within 5% of the fewest Redis
// calls; then the fewest calls, then the fewest stranded units.
func recommend(s scenario, c criteria, results []result) (result, bool) {
	var ok []result
	for _, r := range results {
		if r.Overshoot <= c.MaxOvershoot*float64(s.Burst) && r.Served >= c.MinServed && r.P99 <= c.MaxP99 {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		return result{}, false
	}
	fewest := slices.MinFunc(ok, func(a, b result) int { return cmp.Compare(a.CallsPerSec, b.CallsPerSec) }).CallsPerSec
	ok = slices.DeleteFunc(ok, func(r result) bool { return r.CallsPerSec > 1.05*fewest })
	return slices.MinFunc(ok, func(a, b result) int {
		return cmp.Or(cmp.Compare(a.Lease.TTL, b.Lease.TTL), cmp.Compare(a.CallsPerSec, b.CallsPerSec), cmp.Compare(a.Stranded, b.Stranded))
	}), true
}
