package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

var deadCommand = &command{
	name:    "dead",
	args:    "",
	summary: "list dead requests, or count them per reason, channel or module",
	about: `Lists dead requests, the oldest death first, a page at a time (--limit;
the next page starts --after the position a page ends with, as it says,
or after a dead request's id), or counts them per
reason code, channel or module (--group-by), the largest group first.
Provider reports and receipts that died are listed in the channel
feedback, and re-emitted as requests are.

Filters: --module, --channel, --code (a reason code such as
provider.unavailable), and the time of death with --since and --until,
each an age (2h, 7d), an RFC 3339 time or a date. Recipients are personal
data: they are shown only with --show-recipients.

Exit code 3 when no dead request matches.`,
	examples: `  tidings dead
  tidings dead --group-by reason
  tidings dead --channel sms --code provider.unavailable --since 2h
  tidings dead --since 2026-05-01 --until 2026-05-02 --limit 20 --json`,
	run: runDead,
}

// groupBy maps --group-by to what the client groups by.
var groupBy = map[string]relay.GroupBy{"reason": relay.ByCode, "channel": relay.ByLane, "module": relay.ByModule}

// filters are the flags that select dead requests.
type filters struct {
	module, channel, code string
	since, until          when
}

func (f *filters) register(fs *flag.FlagSet) {
	fs.StringVar(&f.module, "module", "", "only requests of this `module`")
	fs.StringVar(&f.channel, "channel", "", "only requests of this `channel`")
	fs.StringVar(&f.code, "code", "", "only requests dead of this reason `code`, such as provider.unavailable")
	fs.Var(&f.since, "since", "only requests that died at or after this `time`: an age (2h, 7d: that long ago), an RFC 3339 time or a date")
	fs.Var(&f.until, "until", "only requests that died before this `time` (as --since)")
}

// any reports whether a filter was given.
func (f *filters) any() bool {
	return f.module != "" || f.channel != "" || f.code != "" || f.since.set() || f.until.set()
}

// filter is the client's filter of the flags, ages counted back from now.
func (f *filters) filter(now time.Time) *notification.DeadFilter {
	return &notification.DeadFilter{Module: f.module, Channel: f.channel, Code: f.code, Since: f.since.time(now), Until: f.until.time(now)}
}

func runDead(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	var f filters
	f.register(fs)
	group := fs.String("group-by", "", "count per `group` instead of listing: reason, channel or module")
	limit := fs.Int("limit", relay.ListDeadLimitDefault, "most requests of a page, at most 10000")
	after := fs.String("after", "", "start the page after this `position` (what a page ends with) or dead request id")
	show := fs.Bool("show-recipients", false, "show recipients (personal data)")
	if code, ok := c.parseFlags(e, fs, args); !ok {
		return code
	}
	by, grouped := groupBy[*group]
	if *group != "" && !grouped {
		return c.usageError(e, "--group-by %q: want reason, channel or module", *group)
	}
	if *limit < 1 || *limit > deadLimitMax {
		return c.usageError(e, "--limit %d: want 1 to %d", *limit, deadLimitMax)
	}
	var afterID uuid.UUID
	var afterPos *notification.Dead // a position next_after gave
	if *after != "" {
		var err error
		if at, id, ok := strings.Cut(*after, "_"); ok {
			afterPos = &notification.Dead{}
			afterPos.FailedAt, err = time.Parse(time.RFC3339Nano, at)
			if err == nil {
				afterPos.FailedAt = afterPos.FailedAt.UTC()
				afterPos.ID, err = uuid.Parse(id)
			}
		} else {
			afterID, err = uuid.Parse(*after)
		}
		if err != nil {
			return c.usageError(e, "--after %q is neither a request id nor a position a page gave", *after)
		}
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	df := f.filter(s.now)

	if grouped {
		groups, err := s.client.CountDead(ctx, df, by)
		if err != nil {
			return c.fail(e, err)
		}
		if err := printGroups(e.stdout, cn.json, *group, groups); err != nil {
			return c.fail(e, err)
		}
		return exitIfNone(len(groups))
	}

	switch {
	case afterPos != nil:
		df.After = afterPos
	case *after != "":
		prev, err := s.client.ListDead(ctx, &notification.DeadFilter{IDs: []uuid.UUID{afterID}})
		if err != nil {
			return c.fail(e, err)
		}
		if len(prev) == 0 {
			return c.usageError(e, "--after %s: no such dead request", afterID)
		}
		df.After = &prev[0]
	}
	df.Limit = *limit
	page, err := s.client.ListDead(ctx, df)
	if err != nil {
		return c.fail(e, err)
	}
	var next string
	if len(page) == *limit {
		// Its time of death and id: the next page starts there even if
		// this request is re-emitted meanwhile.
		last := page[len(page)-1]
		next = last.FailedAt.UTC().Format(time.RFC3339Nano) + "_" + last.ID.String()
	}
	views := viewDead(page, *show)
	if cn.json {
		err = writeJSON(e.stdout, struct {
			Dead      []deadView `json:"dead"`
			NextAfter string     `json:"next_after,omitempty"`
		}{views, next})
	} else {
		err = printDead(e.stdout, views, *show)
	}
	if err != nil {
		return c.fail(e, err)
	}
	if next != "" && !cn.json {
		fmt.Fprintf(e.stderr, "more may follow: add --after %s\n", next)
	}
	return exitIfNone(len(page))
}

// exitIfNone is exitNone when n is zero, else exitOK.
func exitIfNone(n int) int {
	if n == 0 {
		return exitNone
	}
	return exitOK
}

// deadView is a dead request as the command shows it.
type deadView struct {
	ID            uuid.UUID `json:"id"`
	Module        string    `json:"module"`
	Channel       string    `json:"channel"`
	Template      string    `json:"template,omitempty"`
	Recipient     string    `json:"recipient,omitempty"` // only with --show-recipients
	Code          string    `json:"code"`
	Reason        string    `json:"reason"`
	Attempts      int       `json:"attempts"`
	Hands         int       `json:"hands"`
	StagedAt      time.Time `json:"staged_at"`
	FailedAt      time.Time `json:"failed_at"`
	CorrelationID string    `json:"correlation_id"`
}

// viewDead is dead as the command shows it: with recipients only when
// show is set.
func viewDead(dead []notification.Dead, show bool) []deadView {
	out := make([]deadView, len(dead))
	for i, d := range dead {
		out[i] = deadView{ID: d.ID, Module: d.Module, Channel: d.Channel, Template: d.Template, Code: d.Code,
			Reason: d.Reason, Attempts: d.Attempts, Hands: d.Hands, StagedAt: d.CreatedAt, FailedAt: d.FailedAt,
			CorrelationID: d.CorrelationID}
		if show {
			out[i].Recipient = d.Recipient
		}
	}
	return out
}

// reasonWidth is how much of a reason a table shows: status ID shows it
// whole.
const reasonWidth = 80

// printDead writes dead requests as a table, with a recipient column when
// show is set.
func printDead(w io.Writer, dead []deadView, show bool) error {
	header := []string{"FAILED AT", "ID", "MODULE", "CHANNEL", "CODE", "ATTEMPTS"}
	if show {
		header = append(header, "RECIPIENT")
	}
	t := newTable(w, append(header, "REASON")...)
	for _, d := range dead {
		row := []string{stamp(d.FailedAt), d.ID.String(), d.Module, orDash(d.Channel), orDash(d.Code), strconv.Itoa(d.Attempts)}
		if show {
			row = append(row, d.Recipient)
		}
		t.row(append(row, clip(d.Reason, reasonWidth))...)
	}
	return t.flush()
}

// groupView is a group of dead requests as the command shows it.
type groupView struct {
	Key   string    `json:"key"`
	Count int64     `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// printGroups writes the groups of dead requests by what (reason, channel
// or module) as a table or JSON, with their total.
func printGroups(w io.Writer, asJSON bool, what string, groups []relay.DeadGroup) error {
	views := make([]groupView, len(groups))
	var total int64
	for i, g := range groups {
		views[i] = groupView(g)
		total += g.Count
	}
	if asJSON {
		return writeJSON(w, struct {
			GroupBy string      `json:"group_by"`
			Total   int64       `json:"total"`
			Groups  []groupView `json:"groups"`
		}{what, total, views})
	}
	t := newTable(w, map[string]string{"reason": "REASON CODE", "channel": "CHANNEL", "module": "MODULE"}[what],
		"COUNT", "FIRST DEATH", "LAST DEATH")
	for _, g := range views {
		t.row(orDash(g.Key), count(g.Count), stamp(g.First), stamp(g.Last))
	}
	t.row("total", count(total), "", "")
	return t.flush()
}

// deadLimitMax bounds dead's --limit: a page is read whole, payloads
// included, before it is printed.
const deadLimitMax = 10000
