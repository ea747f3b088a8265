package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tidings-go/tidings/internal/logbuf"
)

// TestMain lets the backlog scenario start this test binary as its relay
// child, as it starts the command itself.
func TestMain(m *testing.M) {
	if arg, ok := childConfigArg(os.Args[1:]); ok {
		if err := runChild(context.Background(), arg); err != nil {
			os.Stderr.WriteString("child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Every scenario runs, in miniature, on a throwaway durable cluster of its
// own, and reports: the drains verify that each request was delivered
// exactly once and fail the run otherwise.
func TestEveryScenarioRuns(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	err := run(t.Context(), []string{
		"-out", dir, "-rules",
		"-events", "300", "-drain", "auto:dropped/500/500,auto:sends/500/500,shared/50/200",
		"-rate", "200,400", "-duration", "1s", "-warmup", "100ms", "-steady-writers", "4", "-history", "1000", "-wake", "listen,after,poll10ms",
		"-writers", "1,4", "-stage-duration", "1s",
		"-sustain", "2s", "-window", "100ms", "-sustain-events", "8000",
		"-backlog", "200,400",
		"-ceiling-duration", "1s", "-ceiling-clients1", "2", "-ceiling-clients50", "2",
		"-ceiling-rows1", "20000", "-ceiling-rows50", "100000", // more than 1 s takes: a ceiling that runs out is an error
	}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	report := out.String()
	for _, want := range []string{
		"- fsync: on",
		"- the database's collation: C", // pgtemp's initdb --no-locale
		"### Ceiling (pgbench, same run)",
		"| pgbench: 50 deliveries per tx, 2 clients | events/s |",
		"| pgbench: 50 deliveries per tx, 2 clients: CPU the hypervisor gave other machines (steal) | cores |",
		"| Outbox.Stage, 4 writers, NOTIFY after commit (relay.Waker) | commits/s |",
		"| relay LISTEN (sweep 30 s), commit auto:dropped, 400/s: p99 | ms |",
		"| relay LISTEN (sweep 30 s), commit auto:dropped, 400/s: CPU the hypervisor gave other machines (steal) while the writers staged | cores |",
		"| relay LISTEN (sweep 30 s), commit auto:dropped, 400/s: p99 of each 1s window, worst | ms |",
		"| relay LISTEN (sweep 30 s), commit auto:dropped, 400/s: CPU of PostgreSQL while the writers staged | cores |",
		"| drain 300, commit shared, BatchSize 50, Concurrency 200: first to last settle | events/s |",
		"### Sustained drain",
		"| drain 300, commit auto:dropped, BatchSize 500, Concurrency 500, every rule: first to last settle | events/s |",
		"### Targets",
		"| default drain, a module whose provider drops a repeated key (auto:dropped/500/500) |",
		"| the recipient rules and the timeline, auto:sends/500/500 |",
		"![Drain rate per setting (commit/BatchSize/Concurrency)](drain.svg)",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	// The idle CPU of a steady run is a part of the machine's cores.
	idle := regexp.MustCompile(`\| relay LISTEN \(sweep 30 s\), commit auto:dropped, 400/s: CPU the machine left idle while the writers staged \| cores \| ([0-9.e-]+) \|`).
		FindStringSubmatch(report)
	if idle == nil {
		t.Errorf("the report lacks the idle CPU of the steady run at 400/s:\n%s", report)
	} else if v, err := strconv.ParseFloat(idle[1], 64); err != nil || v < 0 || v > float64(numCPU()) {
		t.Errorf("the steady run at 400/s left %s cores idle, want 0 to %d (%v)", idle[1], numCPU(), err)
	}
	// The backlog runs the best drain setting of the run, whichever of
	// the three that was on a machine this busy.
	if !regexp.MustCompile(`\| backlog 400, commit [a-z:]+, BatchSize (50|500), Concurrency (200|500): relay peak RSS \(VmHWM\) \| MiB \|`).MatchString(report) {
		t.Errorf("the report lacks the backlog's peak RSS:\n%s", report)
	}
	for _, what := range []string{"PostgreSQL CPU per event, client sessions", "PostgreSQL CPU per event, autovacuum",
		"autovacuum passes over the schema's tables finished", "CPU the hypervisor gave other machines \\(steal\\)"} {
		if !regexp.MustCompile(`\| sustain 8000, [^|]+: window 1 \(0s to 100ms\): ` + what + ` \|`).MatchString(report) {
			t.Errorf("the report lacks the sustained drain's first window's %s:\n%s", what, report)
		}
	}
	saved, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil || string(saved) != report {
		t.Errorf("report.md is not the report printed (%v)", err)
	}
	for _, name := range []string{"latency.svg", "drain.svg", "sustain.svg", "cpu.svg", resultsFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("-out wrote no %s: %v", name, err)
		} else if strings.HasSuffix(name, ".svg") {
			parseSVG(t, b)
		}
	}
	if _, err := parseBaseline(filepath.Join(dir, resultsFile)); err != nil {
		t.Errorf("a later run cannot take this run as its baseline: %v", err)
	}
}

// The drains and the backlog child also run on lib/pq, the other driver a
// service may use, and still deliver every request exactly once.
func TestDriverPqDrains(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"-driver", "pq", "-only", "drain,backlog", "-rules",
		"-events", "300", "-drain", "auto:sends/50/50,shared/50/200", "-backlog", "200"}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"- -driver=pq",
		"| drain 300, commit auto:sends, BatchSize 50, Concurrency 50, every rule: first to last settle | events/s |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if !regexp.MustCompile(`\| backlog 200, commit [a-z:]+, BatchSize 50, Concurrency (50|200): relay peak RSS \(VmHWM\) \| MiB \|`).MatchString(out.String()) {
		t.Errorf("the report lacks the backlog child's peak RSS:\n%s", out.String())
	}
}

// An unknown driver is refused before anything runs, naming the flag.
func TestUnknownDriverIsRefused(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseConfig([]string{"-driver", "mysql"}, &stderr)
	if err == nil || !strings.Contains(stderr.String(), `-driver: unknown driver "mysql"`) {
		t.Fatalf("parseConfig = %v, stderr %q", err, stderr.String())
	}
}

// Each round of the drain begins with the delivery ceilings, so that
// each is measured beside the drains it is the ceiling of, and the
// targets give every round's drain against its round's ceiling.
func TestCeilingsBesideEachDrainRound(t *testing.T) {
	var log logbuf.Buffer
	progressOut = &log
	t.Cleanup(func() { progressOut = os.Stderr })
	var out bytes.Buffer
	err := run(t.Context(), []string{"-only", "ceiling,drain", "-runs", "2", "-ceiling-stage=false",
		"-events", "300", "-drain", "auto:dropped/500/500",
		"-ceiling-duration", "1s", "-ceiling-clients1", "2", "-ceiling-clients50", "2",
		"-ceiling-rows1", "20000", "-ceiling-rows50", "100000", // more than 1 s takes: a ceiling that runs out is an error
	}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var order []string
	for line := range strings.SplitSeq(log.String(), "\n") {
		switch {
		case strings.Contains(line, "ceiling: pgbench: 50 deliveries per tx"):
			order = append(order, "ceiling")
		case strings.Contains(line, "drain, run "):
			order = append(order, "drain")
		}
	}
	if got := strings.Join(order, " "); got != "ceiling drain ceiling drain" {
		t.Errorf("the 50-per-transaction ceiling and the drain ran in the order %q, want each drain round after a ceiling\n%s", got, log.String())
	}
	if !regexp.MustCompile(`\| default drain, a module whose provider drops a repeated key \(auto:dropped/500/500\) \| [0-9]+ events/s = [0-9.]+ of [0-9]+; round by round, of the ceiling measured before it: [0-9.]+, [0-9.]+ \|`).
		MatchString(out.String()) {
		t.Errorf("the default drain's target lacks its rounds' ratios:\n%s", out.String())
	}
}
