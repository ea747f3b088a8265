package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

var reemitCommand = &command{
	name:    "reemit",
	args:    "[ID...]",
	summary: "hand dead requests back to their relays once the cause is fixed",
	about: `Hands the dead requests it selects back to their relays: each keeps its
id, so a provider that deduplicates still does, gets a fresh budget of
attempts, and is due at once; its timeline keeps the life that ended.

Select by ids, or by the filters of "tidings dead" (--code, --channel,
--module, --since, --until), or everything with --all. It first shows how
many match, per reason code, and the first of them; --dry-run stops there.
Then it asks on standard input, unless --yes is given; when standard input
is no terminal it refuses without --yes. Only requests dead by then are
re-emitted: one that dies while it asks is not.

Exit code 3 when no dead request matches, 4 when the answer was not yes.`,
	examples: `  tidings reemit --channel sms --code provider.unavailable --since 1h --dry-run
  tidings reemit --channel sms --since 2026-05-01T09:00:00Z --until 2026-05-01T10:00:00Z
  tidings reemit 0196b3c2-5f4e-7a1b-9c3d-2e4f6a8b0c1d --yes
  tidings reemit --all --yes --json`,
	run: runReemit,
}

// sampleSize is how many of the matching requests reemit shows.
const sampleSize = 20

func runReemit(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	var f filters
	f.register(fs)
	all := fs.Bool("all", false, "every dead request")
	dry := fs.Bool("dry-run", false, "show how many and which match, and re-emit nothing")
	yes := fs.Bool("yes", false, "re-emit without asking")
	show := fs.Bool("show-recipients", false, "show recipients (personal data)")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	var ids []uuid.UUID // nil selects by the filters alone; empty, nothing
	for _, p := range pos {
		id, err := uuid.Parse(p)
		if err != nil {
			return c.usageError(e, "%q is no request id", p)
		}
		ids = append(ids, id)
	}
	switch selected := len(ids) > 0 || f.any(); {
	case !selected && !*all:
		return c.usageError(e, "name what to re-emit: request ids, filters (--code, --channel, --module, --since, --until) or --all")
	case selected && *all:
		return c.usageError(e, "--all takes no ids or filters")
	case !*dry && !*yes && !isTerminal(e.stdin):
		return c.usageError(e, "standard input is no terminal to ask at: pass --yes to re-emit without asking, or --dry-run to look")
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	df := f.filter(s.now)
	df.IDs = ids
	// What is shown is what is re-emitted: nothing that dies after now.
	if df.Until.IsZero() || df.Until.After(s.now) {
		df.Until = s.now
	}
	groups, err := s.client.CountDead(ctx, df, relay.ByCode)
	if err != nil {
		return c.fail(e, err)
	}
	var matched int64
	for _, g := range groups {
		matched += g.Count
	}
	sampled := *df
	sampled.Limit = sampleSize
	sample, err := s.client.ListDead(ctx, &sampled)
	if err != nil {
		return c.fail(e, err)
	}
	report := reemitReport{Matched: matched, ByReason: make([]groupView, len(groups)), Requests: viewDead(sample, *show), DryRun: *dry}
	for i, g := range groups {
		report.ByReason[i] = groupView(g)
	}
	if !cn.json {
		report.printMatched(e.stdout, *show)
	}
	switch {
	case matched == 0:
		return report.finish(c, e, cn.json, exitNone, "no dead request matches")
	case *dry:
		return report.finish(c, e, cn.json, exitOK, "dry run: nothing re-emitted")
	case !*yes && !confirm(ctx, e, fmt.Sprintf("Re-emit these %d requests? [y/N] ", matched)):
		return report.finish(c, e, cn.json, exitDeclined, "not confirmed: nothing re-emitted")
	}
	if report.Reemitted, err = s.client.Reemit(ctx, df); err != nil {
		return c.fail(e, err)
	}
	if report.Reemitted == 0 {
		return report.finish(c, e, cn.json, exitNone, "nothing re-emitted: the requests were re-emitted or purged meanwhile")
	}
	return report.finish(c, e, cn.json, exitOK, fmt.Sprintf("re-emitted %d requests", report.Reemitted))
}

// reemitReport is what reemit found and did.
type reemitReport struct {
	Matched   int64       `json:"matched"`
	ByReason  []groupView `json:"by_reason"`
	Requests  []deadView  `json:"requests"` // the first sampleSize
	DryRun    bool        `json:"dry_run"`
	Reemitted int64       `json:"reemitted"`
}

// printMatched writes how many requests match, per reason, and the first
// of them.
func (r reemitReport) printMatched(w io.Writer, show bool) {
	if r.Matched == 0 {
		return
	}
	var reasons []string
	for _, g := range r.ByReason {
		reasons = append(reasons, fmt.Sprintf("%s %d", orDash(g.Key), g.Count))
	}
	fmt.Fprintf(w, "%d dead requests match (%s):\n", r.Matched, strings.Join(reasons, ", "))
	_ = printDead(w, r.Requests, show)
	if more := r.Matched - int64(len(r.Requests)); more > 0 {
		fmt.Fprintf(w, "... and %d more\n", more)
	}
}

// finish writes the report as JSON, or its outcome as a line (on stderr
// unless the code is exitOK), and returns code.
func (r reemitReport) finish(c *command, e *env, asJSON bool, code int, outcome string) int {
	switch {
	case asJSON:
		if err := writeJSON(e.stdout, r); err != nil {
			return c.fail(e, err)
		}
	case code == exitOK:
		fmt.Fprintln(e.stdout, outcome)
	default:
		fmt.Fprintf(e.stderr, "tidings %s: %s\n", c.name, outcome)
	}
	return code
}

// confirm asks question on stderr and reports whether the line standard
// input answers is yes. An interrupt (ctx ends) while it waits is no.
func confirm(ctx context.Context, e *env, question string) bool {
	fmt.Fprint(e.stderr, question)
	answered := make(chan string, 1)
	go func() { // left waiting on an interrupt: the command ends soon after
		answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
		answered <- answer
	}()
	select {
	case answer := <-answered:
		switch strings.ToLower(strings.TrimSpace(answer)) {
		case "y", "yes":
			return true
		}
		return false
	case <-ctx.Done():
		fmt.Fprintln(e.stderr)
		return false
	}
}

// terminal is what a stand-in for a terminal says of itself, as the
// tests' does.
type terminal interface{ Terminal() bool }

// isTerminal reports whether r is a terminal a person may answer at: a
// character device other than the null device (what cron and CI give),
// or a reader that says it is one.
func isTerminal(r io.Reader) bool {
	switch r := r.(type) {
	case terminal:
		return r.Terminal()
	case *os.File:
		info, err := r.Stat()
		if err != nil || info.Mode()&os.ModeCharDevice == 0 {
			return false
		}
		null, err := os.Stat(os.DevNull)
		return err != nil || !os.SameFile(info, null)
	}
	return false
}
