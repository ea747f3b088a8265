package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

var statusCommand = &command{
	name:    "status",
	args:    "ID | --correlation ID",
	summary: "one request, or a write's requests: state, reason, timeline",
	about: `Shows what is known of the request ID: its state (pending, processed,
dead or cancelled) and, once processed, how it ended (delivered, or
stopped by a recipient rule: suppressed, skipped, expired, duplicate, with
the rule's code), channel, module, attempts and hands, the reason of its
death or of its last retry with the reason's code, the provider's reference
once it was delivered, the next attempt while it is pending, its
correlation and trace ids, and its whole timeline, every life of it
included (a request that died and was re-emitted shows both).

With --correlation, a line for each request staged with that correlation
id (the id of the write that staged them), at most 100, then the same
for each.

Exit code 3 when there is no such request (or it was purged).`,
	examples: `  tidings status 0196b3c2-5f4e-7a1b-9c3d-2e4f6a8b0c1d
  tidings status --correlation booking-2
  tidings status 0196b3c2-5f4e-7a1b-9c3d-2e4f6a8b0c1d --json`,
	run: runStatus,
}

func runStatus(ctx context.Context, e *env, c *command, args []string) int {
	fs, cn := c.flags(e)
	correlation := fs.String("correlation", "", "show every request staged with this correlation `id`")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	var ids []uuid.UUID
	switch {
	case *correlation != "" && len(pos) == 0:
	case *correlation == "" && len(pos) == 1:
		id, err := uuid.Parse(pos[0])
		if err != nil {
			return c.usageError(e, "%q is no request id", pos[0])
		}
		ids = []uuid.UUID{id}
	default:
		return c.usageError(e, "want one request ID, or --correlation ID")
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	if *correlation != "" {
		found, err := s.client.FindByCorrelation(ctx, *correlation, 0)
		if err != nil {
			return c.fail(e, err)
		}
		for _, f := range found {
			ids = append(ids, f.ID)
		}
		if len(ids) == 0 {
			fmt.Fprintf(e.stderr, "tidings status: no request has correlation id %q\n", *correlation)
			return exitNone
		}
		if len(ids) == relay.FindLimitDefault {
			fmt.Fprintf(e.stderr, "tidings status: the first %d requests of correlation id %q only\n", len(ids), *correlation)
		}
	}
	views := make([]statusView, len(ids))
	for i, id := range ids {
		st, err := s.client.Status(ctx, id)
		if errors.Is(err, relay.ErrNotFound) {
			fmt.Fprintf(e.stderr, "tidings status: no request %s (never staged here, or purged after its retention)\n", id)
			return exitNone
		}
		if err != nil {
			return c.fail(e, err)
		}
		views[i] = viewStatus(st)
	}
	switch {
	case cn.json && *correlation != "":
		err = writeJSON(e.stdout, struct {
			CorrelationID string       `json:"correlation_id"`
			Requests      []statusView `json:"requests"`
		}{*correlation, views})
	case cn.json:
		err = writeJSON(e.stdout, views[0])
	default:
		if *correlation != "" {
			err = summarize(e.stdout, views)
		}
		for i, v := range views {
			if err != nil {
				break
			}
			if i > 0 || *correlation != "" {
				fmt.Fprintln(e.stdout)
			}
			err = v.print(e.stdout)
		}
	}
	if err != nil {
		return c.fail(e, err)
	}
	return exitOK
}

// statusView is a request's status as the command shows it.
type statusView struct {
	ID            uuid.UUID     `json:"id"`
	State         relay.State   `json:"state"`
	Outcome       string        `json:"outcome,omitempty"` // what became of a processed request: delivered, suppressed...
	Module        string        `json:"module"`
	Channel       string        `json:"channel"`
	Kind          string        `json:"kind"`
	Attempts      int           `json:"attempts"`
	Hands         int           `json:"hands"`
	Unsure        int           `json:"unsure"`
	Code          string        `json:"code,omitempty"`
	Reason        string        `json:"reason,omitempty"`     // why a dead request died
	LastError     string        `json:"last_error,omitempty"` // the last retry's reason
	Reference     string        `json:"reference,omitempty"`  // the provider's, once delivered
	NextAttempt   *time.Time    `json:"next_attempt,omitempty"`
	StagedAt      time.Time     `json:"staged_at"`
	SettledAt     *time.Time    `json:"settled_at,omitempty"`
	CorrelationID string        `json:"correlation_id"`
	CausationID   string        `json:"causation_id,omitempty"`
	TraceID       string        `json:"trace_id,omitempty"`
	Timeline      []relay.Entry `json:"timeline"`
}

func viewStatus(st notification.Status) statusView {
	v := statusView{ID: st.ID, State: st.State, Outcome: string(st.Outcome), Module: st.Module, Channel: st.Channel, Kind: st.Kind,
		Attempts: st.Attempts, Hands: st.Hands, Unsure: st.Unsure, Code: st.Code, Reason: st.Reason,
		LastError: st.LastError, Reference: st.Reference, NextAttempt: optTime(st.NextAttempt),
		StagedAt: st.CreatedAt, SettledAt: optTime(st.SettledAt), CorrelationID: st.CorrelationID,
		CausationID: st.CausationID, TraceID: st.TraceID, Timeline: st.Timeline}
	return v
}

// summarize writes a line per request of views, before their details:
// more than two events (staged, done) mean it was not delivered at once.
func summarize(w io.Writer, views []statusView) error {
	t := newTable(w, "ID", "CHANNEL", "STATE", "CODE", "ATTEMPTS", "EVENTS", "SETTLED")
	for _, v := range views {
		settled := "-"
		if v.SettledAt != nil {
			settled = stamp(*v.SettledAt)
		}
		t.row(v.ID.String(), orDash(v.Channel), string(v.State), orDash(v.Code), strconv.Itoa(v.Attempts),
			strconv.Itoa(len(v.Timeline)), settled)
	}
	return t.flush()
}

// print writes v as a person reads it: the figures, then the timeline.
func (v statusView) print(w io.Writer) error {
	t := newTable(w, "request", v.ID.String())
	state := string(v.State)
	if v.Outcome != "" {
		state += " (" + v.Outcome + ")"
	}
	if v.SettledAt != nil {
		state += " at " + stamp(*v.SettledAt)
	} else if v.Attempts == 0 && v.Hands == 0 {
		state += ", not tried yet"
	}
	t.row("state", state)
	t.row("channel", orDash(v.Channel))
	t.row("module", v.Module)
	t.row("attempts", fmt.Sprintf("%d (hands %d, unsure %d)", v.Attempts, v.Hands, v.Unsure))
	switch {
	case v.Reason != "":
		t.row("reason", v.Code+": "+v.Reason)
	case v.State == relay.StatePending && v.LastError != "":
		t.row("last error", v.Code+": "+v.LastError)
	case v.Code != "":
		t.row("code", v.Code)
	}
	if v.Reference != "" {
		t.row("reference", v.Reference)
	}
	if v.NextAttempt != nil {
		t.row("next attempt", stamp(*v.NextAttempt))
	}
	t.row("staged", stamp(v.StagedAt))
	t.row("correlation", v.CorrelationID)
	if v.CausationID != "" {
		t.row("causation", v.CausationID)
	}
	if v.TraceID != "" {
		t.row("trace", v.TraceID)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ntimeline:")
	t = newTable(w, "AT", "EVENT", "HAND", "CODE", "REASON", "DETAIL")
	for _, en := range v.Timeline {
		t.row(stamp(en.At), en.Event, strconv.Itoa(en.Hand), orDash(en.Code), orDash(en.Reason), details(en.Detail))
	}
	return t.flush()
}
