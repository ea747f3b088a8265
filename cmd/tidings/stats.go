package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

var statsCommand = &command{
	name:    "stats",
	args:    "",
	summary: "pending, due, oldest, dead, and the last minutes' rates",
	about: `Shows, per module and channel, the pending requests due now (waiting for
a relay) and scheduled (for later, waiting for a retry, or in flight), how
long the oldest due one has waited, and the dead ones; the dead ones per
reason code; and how many were processed (delivered, or ended by a
recipient rule, or a provider's report applied) and died in each of the
last minutes. A due request that waits much longer than the relays' sweep
interval (30 s by default) means no relay takes it.

It reads only the pending and dead requests and those settled in the last
minutes, through their indexes, by the database's clock.`,
	examples: `  tidings stats
  tidings stats --module bookings --minutes 15
  tidings stats --json`,
	run: runStats,
}

func runStats(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	module := fs.String("module", "", "only this `module`'s requests")
	minutes := fs.Int("minutes", 5, fmt.Sprintf("how many of the last minutes to count (1 to %d)", relay.ThroughputMinutesMax))
	if code, ok := c.parseFlags(e, fs, args); !ok {
		return code
	}
	if *minutes < 1 || *minutes > relay.ThroughputMinutesMax {
		return c.usageError(e, "--minutes %d: want 1 to %d", *minutes, relay.ThroughputMinutesMax)
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	st, err := s.client.Stats(ctx, *module)
	if err != nil {
		return c.fail(e, err)
	}
	rates, err := s.client.Throughput(ctx, *module, *minutes)
	if err != nil {
		return c.fail(e, err)
	}
	v := viewStats(st, rates)
	if cn.json {
		err = writeJSON(e.stdout, v)
	} else {
		err = v.print(e.stdout)
	}
	if err != nil {
		return c.fail(e, err)
	}
	return exitOK
}

// statsView is the picture stats shows.
type statsView struct {
	At      time.Time      `json:"at"`
	Lanes   []laneView     `json:"channels"`
	Dead    []deadCodeView `json:"dead"`
	Minutes []minuteView   `json:"minutes"`
}

type laneView struct {
	Module    string  `json:"module"`
	Channel   string  `json:"channel"`
	Due       int64   `json:"due"`
	Scheduled int64   `json:"scheduled"`
	OldestDue float64 `json:"oldest_due_seconds"`
	Dead      int64   `json:"dead"`
}

type deadCodeView struct {
	Module  string `json:"module"`
	Channel string `json:"channel"`
	Code    string `json:"code"`
	Count   int64  `json:"count"`
}

type minuteView struct {
	Start     time.Time `json:"start"`
	Processed int64     `json:"processed"`
	Dead      int64     `json:"dead"`
}

func viewStats(st relay.Stats, rates []relay.Minute) statsView {
	v := statsView{At: st.At, Lanes: make([]laneView, len(st.Lanes)), Dead: make([]deadCodeView, len(st.Dead)),
		Minutes: make([]minuteView, len(rates))}
	for i, l := range st.Lanes {
		v.Lanes[i] = laneView{Module: l.Module, Channel: l.Lane, Due: l.Due, Scheduled: l.Scheduled,
			OldestDue: l.OldestDue.Seconds(), Dead: l.Dead}
	}
	for i, d := range st.Dead {
		v.Dead[i] = deadCodeView{Module: d.Module, Channel: d.Lane, Code: d.Code, Count: d.Count}
	}
	for i, m := range rates {
		v.Minutes[i] = minuteView(m)
	}
	return v
}

// print writes v as three tables.
func (v statsView) print(w io.Writer) error {
	fmt.Fprintf(w, "at %s, by the database's clock\n\nrequests by channel:\n", stamp(v.At))
	t := newTable(w, "MODULE", "CHANNEL", "DUE", "SCHEDULED", "OLDEST DUE", "DEAD")
	var total laneView
	for _, l := range v.Lanes {
		oldest := "-"
		if l.Due > 0 {
			oldest = age(time.Duration(l.OldestDue * float64(time.Second)))
		}
		t.row(l.Module, orDash(l.Channel), count(l.Due), count(l.Scheduled), oldest, count(l.Dead))
		total.Due, total.Scheduled, total.Dead = total.Due+l.Due, total.Scheduled+l.Scheduled, total.Dead+l.Dead
	}
	t.row("total", "", count(total.Due), count(total.Scheduled), "", count(total.Dead))
	if err := t.flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\ndead by reason:")
	t = newTable(w, "MODULE", "CHANNEL", "REASON CODE", "COUNT")
	for _, d := range v.Dead {
		t.row(d.Module, orDash(d.Channel), orDash(d.Code), count(d.Count))
	}
	if err := t.flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nthe last %d minutes:\n", len(v.Minutes))
	t = newTable(w, "MINUTE FROM", "PROCESSED", "DEAD")
	var done, dead int64
	for _, m := range v.Minutes {
		t.row(stamp(m.Start), count(m.Processed), count(m.Dead))
		done, dead = done+m.Processed, dead+m.Dead
	}
	n := float64(len(v.Minutes))
	t.row("per minute", strconv.FormatFloat(float64(done)/n, 'f', 1, 64), strconv.FormatFloat(float64(dead)/n, 'f', 1, 64))
	return t.flush()
}

// count formats a count for a table.
func count(n int64) string { return strconv.FormatInt(n, 10) }
