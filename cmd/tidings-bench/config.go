package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidings-go/tidings/relay"
)

// errUsage is a command line that cannot run; flag has said why.
var errUsage = errors.New("usage")

// scenarios in the order they run.
var scenarios = []string{"ceiling", "stage", "steady", "drain", "sustain", "backlog"}

// config is the command line.
type config struct {
	database string
	driver   driver
	only     []string
	runs     int
	longRuns int // runs of sustain and backlog

	// drain
	events      int
	commits     []string
	batches     []int
	concurrency []int
	drains      []drainConfig // explicit settings; nil means every combination of the three lists
	rules       bool          // each drain again with every recipient rule on
	policies    bool          // each drain again with the recipient policies alone
	stageChunk  int

	// steady
	rates         []int
	duration      time.Duration
	warmup        time.Duration
	wakes         []wake
	steadyCommits []string
	steadyWriters int
	history       int

	// sustain
	sustain       time.Duration
	sustainEvents int
	window        time.Duration

	// stage
	writers       []int
	stageDuration time.Duration
	stageModes    []string

	// backlog
	backlogs []int

	// ceiling
	ceilingDuration  time.Duration
	ceilingClients1  int
	ceilingClients50 int
	ceilingRows1     int
	ceilingRows50    int
	ceilingStage     bool
	pgbench          string

	cpuprofile string
	out        string   // directory of the report, its charts and resultsFile; "" writes stdout only
	baseline   baseline // the default drain of an auto:sends module before

	// flags is every flag with its value, for the report.
	flags [][2]string
}

// wake is one wake-up path of the relay.
type wake struct {
	name   string
	listen bool          // the relay LISTENs
	after  bool          // the wake-up is sent after the commit, by a relay.Waker
	sweep  time.Duration // the sweep interval; 0 is the relay's default
}

func (w wake) String() string { return w.name }

// notify reports whether staging sends the wake-up inside the writer's
// transaction: when the relay listens and no relay.Waker sends it after.
func (w wake) notify() bool { return w.listen && !w.after }

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("tidings-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var baselineArg, drains, rates, stageModes, only, commits, batches, conc, wakes, steadyCommits, writers, backlogs string
	fs.StringVar(&c.database, "database", "", "PostgreSQL URL; empty starts a durable throwaway cluster (fsync and synchronous_commit on)")
	var driverArg string
	fs.StringVar(&driverArg, "driver", string(driverPgx), "database/sql driver of every pool and the relay's LISTEN session: pgx (jackc/pgx/v5/stdlib, which prepares each statement once per connection) or pq (lib/pq, which parses and plans each statement every time it runs)")
	fs.StringVar(&only, "only", strings.Join(scenarios, ","), "scenarios to run: "+strings.Join(scenarios, ","))
	fs.IntVar(&c.runs, "runs", 1, "how many times to run each scenario; the tables show medians")
	fs.IntVar(&c.longRuns, "long-runs", 0, "how many times to run sustain and backlog; 0 means -runs")

	fs.IntVar(&c.events, "events", 100_000, "drain: requests staged in advance")
	fs.StringVar(&commits, "commit", "auto:dropped,auto:sends", "drain: how the channel's claims commit: each (notification.CommitEach), shared (CommitShared), or CommitAuto, the default, with a delivery that declares what a repeat does: auto:dropped (delivery.RepeatDropped) or auto:sends (RepeatSends)")
	fs.StringVar(&batches, "batch", fmt.Sprint(relay.BatchSizeDefault), "drain: relay BatchSize values")
	fs.StringVar(&conc, "concurrency", fmt.Sprint(relay.ConcurrencyDefault), "drain: relay Concurrency values")
	fs.BoolVar(&c.rules, "rules", false, "drain: run each setting twice, without and with every recipient rule on (a subject with preferences and quiet hours, a category, an expiry, a dedup key and a secret per request)")
	fs.BoolVar(&c.policies, "policies", false, "drain: run each setting also with the recipient policies alone on: as -rules, without the dedup key and the secret")
	fs.StringVar(&drains, "drain", "", "drain: explicit settings as commit/BatchSize/Concurrency triples, e.g. auto:dropped/50/50,shared/500/500, with an optional fourth LaneLimit (each/50/50/50; the relay's default otherwise); overrides -commit, -batch and -concurrency")
	fs.IntVar(&c.stageChunk, "stage-chunk", 5000, "requests per StageBatch when staging a backlog")

	fs.StringVar(&rates, "rate", "300,1000,5000", "steady: offered rates, requests staged per second, one per transaction (300/s shows the path on a machine with room to spare)")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "steady: how long to stage at -rate (after -warmup)")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "steady: leading time whose requests are left out of the latencies")
	fs.StringVar(&wakes, "wake", "listen,poll10ms,both", "steady: wake-up paths: listen, after (NOTIFY sent after the commit by a relay.Waker), poll<interval>, both (listen and a 10ms poll) or both<interval>")
	fs.StringVar(&steadyCommits, "steady-commit", "auto:dropped", "steady: how the channel's claims commit, as -commit")
	fs.IntVar(&c.steadyWriters, "steady-writers", 32, "steady: goroutines that stage on the fixed schedule")
	fs.IntVar(&c.history, "history", 100_000, "steady: settled requests, with their inbox claims, in the tables before the run (a relay in operation keeps its retention's worth)")

	fs.DurationVar(&c.sustain, "sustain", 2*time.Minute, "sustain: how long the drain must last")
	fs.IntVar(&c.sustainEvents, "sustain-events", 0, "sustain: requests to stage; 0 sizes them from the drain's rate (or 1,000,000)")
	fs.DurationVar(&c.window, "window", 20*time.Second, "sustain: width of a rate window")

	fs.StringVar(&writers, "writers", "1,8,32", "stage: concurrent writers")
	fs.StringVar(&stageModes, "stage-wake", "none,notify,after", "stage: wake-up modes: none (WithoutWakeUp), notify (NOTIFY in the writer's transaction), after (NOTIFY after the commit by a relay.Waker)")
	fs.DurationVar(&c.stageDuration, "stage-duration", 10*time.Second, "stage: time per writers and wake-up pair")

	fs.StringVar(&backlogs, "backlog", "10000,1000000", "backlog: pending requests per drain; the relay runs in a child process (sizes up to 100,000 run at least 5 times)")

	fs.DurationVar(&c.ceilingDuration, "ceiling-duration", 20*time.Second, "ceiling: pgbench -T of the delivery scripts")
	fs.IntVar(&c.ceilingClients1, "ceiling-clients1", 16, "ceiling: pgbench clients of the one-delivery script")
	fs.IntVar(&c.ceilingClients50, "ceiling-clients50", 4, "ceiling: pgbench clients of the 50-deliveries script")
	fs.IntVar(&c.ceilingRows1, "ceiling-rows1", 300_000, "ceiling: rows pre-filled for the one-delivery script")
	fs.IntVar(&c.ceilingRows50, "ceiling-rows50", 1_500_000, "ceiling: rows pre-filled for the 50-deliveries script")
	fs.BoolVar(&c.ceilingStage, "ceiling-stage", true, "ceiling: also run the staging insert with pgbench for each -writers")
	fs.StringVar(&c.pgbench, "pgbench", "", "pgbench binary; empty looks on PATH, then in /usr/lib/postgresql/*/bin")

	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of this process to the file (a backlog child writes FILE.backlog-N)")

	fs.StringVar(&c.out, "out", "", "directory to write the report (report.md, also on stdout), its SVG charts and "+resultsFile+" into; empty writes the report to stdout only")
	fs.StringVar(&baselineArg, "baseline", "", "the default drain of a module with no protection (auto:sends at the relay's defaults) before: a fraction of the ceiling, e.g. 0.10, or an earlier run's "+resultsFile)

	if err := fs.Parse(args); err != nil {
		return c, errUsage
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "database" {
			c.flags = append(c.flags, [2]string{f.Name, f.Value.String()})
		}
	})
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %q\n", fs.Args())
		return c, errUsage
	}
	var err error
	fail := func(name string, e error) error {
		fmt.Fprintf(stderr, "-%s: %v\n", name, e)
		return errUsage
	}
	if c.driver, err = parseDriver(driverArg); err != nil {
		return c, fail("driver", err)
	}
	for s := range strings.SplitSeq(only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(scenarios, s) {
			return c, fail("only", fmt.Errorf("unknown scenario %q", s))
		}
		c.only = append(c.only, s)
	}
	if c.commits, err = commitModes(commits); err != nil {
		return c, fail("commit", err)
	}
	if c.batches, err = ints(batches, 1); err != nil {
		return c, fail("batch", err)
	}
	if c.concurrency, err = ints(conc, 1); err != nil {
		return c, fail("concurrency", err)
	}
	if drains != "" {
		for t := range strings.SplitSeq(drains, ",") {
			t = strings.TrimSpace(t)
			mode, rest, _ := strings.Cut(t, "/")
			v, err := ints(strings.ReplaceAll(rest, "/", ","), 1)
			if _, merr := commitModes(mode); err != nil || merr != nil || len(v) < 2 || len(v) > 3 {
				return c, fail("drain", fmt.Errorf("%q: want commit/BatchSize/Concurrency[/LaneLimit], commit one of %s", t, strings.Join(commitKinds, ", ")))
			}
			d := drainConfig{commit: mode, batch: v[0], conc: v[1]}
			if len(v) == 3 {
				d.lane = v[2]
			}
			c.drains = append(c.drains, d)
		}
	}
	if c.steadyCommits, err = commitModes(steadyCommits); err != nil {
		return c, fail("steady-commit", err)
	}
	if c.baseline, err = parseBaseline(baselineArg); err != nil {
		return c, fail("baseline", err)
	}
	if c.rates, err = ints(rates, 1); err != nil {
		return c, fail("rate", err)
	}
	if c.writers, err = ints(writers, 1); err != nil {
		return c, fail("writers", err)
	}
	if c.backlogs, err = ints(backlogs, 1); err != nil {
		return c, fail("backlog", err)
	}
	for m := range strings.SplitSeq(stageModes, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains([]string{"none", "notify", "after"}, m) {
			return c, fail("stage-wake", fmt.Errorf("unknown mode %q", m))
		}
		c.stageModes = append(c.stageModes, m)
	}
	for s := range strings.SplitSeq(wakes, ",") {
		w, err := parseWake(strings.TrimSpace(s))
		if err != nil {
			return c, fail("wake", err)
		}
		c.wakes = append(c.wakes, w)
	}
	for _, v := range []struct {
		name string
		ok   bool
	}{
		{"runs", c.runs >= 1},
		{"long-runs", c.longRuns >= 0},
		{"events", c.events >= 1},
		{"duration", c.duration > 0},
		{"warmup", c.warmup >= 0},
		{"steady-writers", c.steadyWriters >= 1},
		{"history", c.history >= 0},
		{"sustain", c.sustain > 0},
		{"sustain-events", c.sustainEvents >= 0},
		{"window", c.window > 0},
		{"stage-duration", c.stageDuration >= time.Second}, // pgbench -T counts whole seconds
		{"stage-chunk", c.stageChunk >= 1},
		{"ceiling-duration", c.ceilingDuration >= time.Second},
		{"ceiling-clients1", c.ceilingClients1 >= 1},
		{"ceiling-clients50", c.ceilingClients50 >= 1},
		{"ceiling-rows1", c.ceilingRows1 >= 1},
		{"ceiling-rows50", c.ceilingRows50 >= 50},
	} {
		if !v.ok {
			return c, fail(v.name, errors.New("out of range"))
		}
	}
	if c.window > c.sustain/2 {
		return c, fail("window", fmt.Errorf("%s is more than half of -sustain (%s): the sustained target compares two windows at least", c.window, c.sustain))
	}
	if c.longRuns == 0 {
		c.longRuns = c.runs
	}
	return c, nil
}

// wants reports whether scenario s is to run.
func (c config) wants(s string) bool { return slices.Contains(c.only, s) }

// ints parses a comma-separated list of integers of at least lo.
func ints(s string, lo int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.ReplaceAll(strings.TrimSpace(f), "_", "")
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		if n < lo {
			return nil, fmt.Errorf("%d is below %d", n, lo)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseWake reads listen, poll<interval>, both or both<interval>.
func parseWake(s string) (wake, error) {
	interval := func(rest string) (time.Duration, error) {
		d, err := time.ParseDuration(rest)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%q: want a positive interval such as 10ms", s)
		}
		return d, nil
	}
	switch {
	case s == "listen":
		return wake{name: s, listen: true}, nil
	case s == "after":
		return wake{name: s, listen: true, after: true}, nil
	case s == "both":
		return wake{name: "both10ms", listen: true, sweep: 10 * time.Millisecond}, nil
	case strings.HasPrefix(s, "both"):
		d, err := interval(strings.TrimPrefix(s, "both"))
		return wake{name: s, listen: true, sweep: d}, err
	case strings.HasPrefix(s, "poll"):
		d, err := interval(strings.TrimPrefix(s, "poll"))
		return wake{name: s, sweep: d}, err
	}
	return wake{}, fmt.Errorf("unknown wake-up path %q: want listen, after, poll<interval>, both or both<interval>", s)
}

// commitModes parses a comma-separated list of commit modes.
func commitModes(s string) ([]string, error) {
	var out []string
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(commitKinds, m) {
			return nil, fmt.Errorf("unknown commit mode %q: want %s", m, strings.Join(commitKinds, ", "))
		}
		out = append(out, m)
	}
	return out, nil
}
