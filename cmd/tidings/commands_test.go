package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	w := setup(t)

	t.Run("Delivered", func(t *testing.T) {
		t.Parallel()
		r := w.tidings(t, nil, "status", w.delivered.String())
		require.Equal(t, exitOK, r.code, r.errOut)
		require.True(t, strings.HasPrefix(r.out, "request "), r.out)
		require.Regexp(t, `state\s+processed \(delivered\) at `, r.out)
		require.Regexp(t, `channel\s+mail`, r.out)
		require.Regexp(t, `reference\s+msg-ada-1`, r.out)
		require.Regexp(t, `correlation\s+`+correlation, r.out)
		require.Regexp(t, `staged\s+0\s+-`, r.out, "the timeline starts with its staging")
		require.Regexp(t, `done\s+1\s+delivered\s+msg-ada-1`, r.out)
		requireNoRecipient(t, r.out)
	})

	t.Run("DeadWithItsReasonAndCode", func(t *testing.T) {
		t.Parallel()
		r := w.tidings(t, nil, "status", "--json", w.invalid.String())
		require.Equal(t, exitOK, r.code, r.errOut)
		var st statusView
		require.NoError(t, json.Unmarshal([]byte(r.out), &st))
		require.Equal(t, relay.StateDead, st.State)
		require.Equal(t, "sms", st.Channel)
		require.Equal(t, module, st.Module)
		require.Equal(t, delivery.CodeInvalidRecipient, st.Code)
		require.Contains(t, st.Reason, "not a valid phone number")
		require.Equal(t, 1, st.Attempts)
		require.Equal(t, 1, st.Hands)
		require.Nil(t, st.NextAttempt, "a dead request has no next attempt")
		var events []string
		for _, e := range st.Timeline {
			events = append(events, e.Event)
		}
		require.Equal(t, []string{"staged", "dead"}, events)
		requireNoRecipient(t, r.out)
	})

	// A request a recipient rule ended is processed, and says how.
	t.Run("SuppressedSaysSo", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, w.client.Suppress(t.Context(), w.db, notification.Suppression{Channel: "mail", Address: "gone@example.com"}))
		id, err := w.client.Stage(t.Context(), w.db, module, notification.Request{Channel: "mail", Recipient: "gone@example.com",
			Template: "reminder"})
		require.NoError(t, err)
		w.wait(t, id)
		r := w.tidings(t, nil, "status", id.String())
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Regexp(t, `state\s+processed \(suppressed\) at `, r.out)
		require.Regexp(t, `code\s+`+regexp.QuoteMeta(notification.CodeSuppressed), r.out)
		r = w.tidings(t, nil, "status", "--json", id.String())
		require.Equal(t, exitOK, r.code, r.errOut)
		var st statusView
		require.NoError(t, json.Unmarshal([]byte(r.out), &st))
		require.Equal(t, string(notification.OutcomeSuppressed), st.Outcome)
	})

	t.Run("PendingShowsItsNextAttempt", func(t *testing.T) {
		t.Parallel()
		later := time.Now().Add(time.Hour)
		id, err := w.client.Stage(t.Context(), w.db, module, notification.Request{Channel: "mail", Recipient: adaMail,
			Template: "reminder", NotBefore: later})
		require.NoError(t, err)
		r := w.tidings(t, nil, "status", id.String())
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Regexp(t, `state\s+pending, not tried yet`, r.out)
		require.Regexp(t, `next attempt\s+`+regexp.QuoteMeta(later.UTC().Format("2006-01-02T15:04")), r.out)
	})

	t.Run("ByCorrelation", func(t *testing.T) {
		t.Parallel()
		r := w.tidings(t, nil, "status", "--correlation", correlation, "--json")
		require.Equal(t, exitOK, r.code, r.errOut)
		var got struct {
			CorrelationID string       `json:"correlation_id"`
			Requests      []statusView `json:"requests"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.Equal(t, correlation, got.CorrelationID)
		require.Len(t, got.Requests, 3)
		require.Equal(t, []uuid.UUID{w.delivered, w.invalid, w.outage},
			[]uuid.UUID{got.Requests[0].ID, got.Requests[1].ID, got.Requests[2].ID})

		r = w.tidings(t, nil, "status", "--correlation", correlation)
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Regexp(t, w.invalid.String()+`\s+sms\s+dead\s+`+delivery.CodeInvalidRecipient, r.out, "a line per request first")
		require.Equal(t, 3, strings.Count(r.out, "timeline:"))
	})

	t.Run("NotFoundAndUsage", func(t *testing.T) {
		t.Parallel()
		r := w.tidings(t, nil, "status", uuid.New().String())
		require.Equal(t, exitNone, r.code)
		require.Contains(t, r.errOut, "no request")
		r = w.tidings(t, nil, "status", "--correlation", "booking-999")
		require.Equal(t, exitNone, r.code)
		for _, args := range [][]string{{"status"}, {"status", "not-an-id"}, {"status", w.delivered.String(), "--correlation", "x"}} {
			r = w.tidings(t, nil, args...)
			require.Equal(t, exitUsage, r.code, "%v", args)
			require.Contains(t, r.errOut, `Run "tidings status -h"`)
		}
	})
}

func TestDead(t *testing.T) {
	t.Parallel()
	w := setup(t)

	t.Run("ListsWithoutRecipients", func(t *testing.T) {
		t.Parallel()
		r := w.tidings(t, nil, "dead")
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Contains(t, r.out, w.invalid.String())
		require.Contains(t, r.out, w.outage.String())
		require.NotContains(t, r.out, w.delivered.String())
		require.Contains(t, r.out, delivery.CodeInvalidRecipient)
		require.NotContains(t, r.out, "RECIPIENT")
		requireNoRecipient(t, r.out)

		r = w.tidings(t, nil, "dead", "--show-recipients")
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Contains(t, r.out, adaPhone)
		require.Contains(t, r.out, gracePhone)
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		r := w.tidings(t, nil, "dead", "--code", delivery.CodeUnavailable, "--channel", "sms", "--since", "1h", "--json")
		require.Equal(t, exitOK, r.code, r.errOut)
		var got struct {
			Dead []deadView `json:"dead"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.Len(t, got.Dead, 1)
		require.Equal(t, w.outage, got.Dead[0].ID)
		require.Empty(t, got.Dead[0].Recipient)
		require.Equal(t, "booking_confirmed", got.Dead[0].Template)

		for _, args := range [][]string{
			{"--channel", "mail"}, {"--module", "other"}, {"--until", "1h"},
			{"--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
		} {
			r := w.tidings(t, nil, append([]string{"dead"}, args...)...)
			require.Equal(t, exitNone, r.code, "%v: %s", args, r.out)
		}
		r = w.tidings(t, nil, "dead", "--since", "yesterday")
		require.Equal(t, exitUsage, r.code)
		require.Contains(t, r.errOut, `"yesterday" is no time`)

		// An offset PostgreSQL would refuse is read in UTC.
		r = w.tidings(t, nil, "dead", "--since", "2020-01-01T00:00:00+16:00")
		require.Equal(t, exitOK, r.code, r.errOut)
		for _, tc := range []struct {
			args []string
			want string
		}{
			// The zero time, as an unset time.Time prints: it read as
			// "now", so --until selected every dead request.
			{[]string{"--until", "0001-01-01T00:00:00Z"}, "before 1970"},
			{[]string{"--until", "0001-01-01"}, "before 1970"},
			{[]string{"--code", "provider.\xff"}, "--code is not valid UTF-8"},
			{[]string{"--channel", "sms\x00"}, "--channel holds a NUL"},
			{[]string{"--limit", "10001"}, "want 1 to 10000"},
		} {
			r = w.tidings(t, nil, append([]string{"dead"}, tc.args...)...)
			require.Equal(t, exitUsage, r.code, "%q: %s", tc.args, r.out)
			require.Contains(t, r.errOut, tc.want, "%q", tc.args)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		first := w.deadPage(t, "--limit", "1")
		require.Len(t, first.Dead, 1)
		require.True(t, strings.HasSuffix(first.NextAfter, "_"+first.Dead[0].ID.String()), first.NextAfter)

		for _, after := range []string{first.NextAfter, first.Dead[0].ID.String()} { // a position, or a dead id
			r := w.tidings(t, nil, "dead", "--limit", "1", "--after", after)
			require.Equal(t, exitOK, r.code, r.errOut)
			require.NotContains(t, r.out, first.Dead[0].ID.String())
			require.Equal(t, 2, strings.Count(r.out, "\n"), "a header and the second request: %s", r.out)
			require.Contains(t, r.errOut, "--after", "more may follow")
		}

		r := w.tidings(t, nil, "dead", "--after", w.delivered.String())
		require.Equal(t, exitUsage, r.code, "not a dead request")
		r = w.tidings(t, nil, "dead", "--after", "yesterday_"+w.delivered.String())
		require.Equal(t, exitUsage, r.code)
	})

	// A page's position holds when its last request is re-emitted
	// meanwhile (by another operator, or the console).
	t.Run("PagesSurviveAReemit", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		first := w.deadPage(t, "--limit", "1")
		require.Len(t, first.Dead, 1)
		r := w.tidings(t, nil, "reemit", first.Dead[0].ID.String(), "--yes")
		require.Equal(t, exitOK, r.code, r.errOut)

		second := w.deadPage(t, "--after", first.NextAfter)
		require.Len(t, second.Dead, 1, "the other dead request")
		require.NotEqual(t, first.Dead[0].ID, second.Dead[0].ID)
	})

	t.Run("GroupBy", func(t *testing.T) {
		t.Parallel()
		r := w.tidings(t, nil, "dead", "--group-by", "reason")
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Regexp(t, delivery.CodeInvalidRecipient+`\s+1\s`, r.out)
		require.Regexp(t, delivery.CodeUnavailable+`\s+1\s`, r.out)
		require.Regexp(t, `total\s+2`, r.out)

		r = w.tidings(t, nil, "dead", "--group-by", "channel", "--json")
		require.Equal(t, exitOK, r.code, r.errOut)
		var got struct {
			GroupBy string      `json:"group_by"`
			Total   int64       `json:"total"`
			Groups  []groupView `json:"groups"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.Equal(t, "channel", got.GroupBy)
		require.EqualValues(t, 2, got.Total)
		require.Len(t, got.Groups, 1)
		require.Equal(t, "sms", got.Groups[0].Key)

		r = w.tidings(t, nil, "dead", "--group-by", "module", "--code", "template.unknown")
		require.Equal(t, exitNone, r.code)
		r = w.tidings(t, nil, "dead", "--group-by", "recipient")
		require.Equal(t, exitUsage, r.code)
	})
}

func TestReemit(t *testing.T) {
	t.Parallel()

	t.Run("DryRunShowsAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		r := w.tidings(t, nil, "reemit", "--channel", "sms", "--since", "1h", "--dry-run")
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Contains(t, r.out, "2 dead requests match (")
		require.Contains(t, r.out, w.invalid.String())
		require.Contains(t, r.out, "dry run: nothing re-emitted")
		requireNoRecipient(t, r.out)
		require.Equal(t, relay.StateDead, w.wait(t, w.invalid).State)
	})

	t.Run("RefusesToGuess", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		r := w.tidings(t, nil, "reemit", "--code", delivery.CodeUnavailable)
		require.Equal(t, exitUsage, r.code, "no terminal to ask at, and no --yes")
		require.Contains(t, r.errOut, "--yes")
		r = w.tidings(t, nil, "reemit", "--yes")
		require.Equal(t, exitUsage, r.code, "nothing named")
		r = w.tidings(t, nil, "reemit", "--all", "--channel", "sms", "--yes")
		require.Equal(t, exitUsage, r.code)

		r = w.tidings(t, typing("n\n"), "reemit", "--code", delivery.CodeUnavailable)
		require.Equal(t, exitDeclined, r.code)
		require.Contains(t, r.errOut, "Re-emit these 1 requests? [y/N]")
		r = w.tidings(t, typing(""), "reemit", "--code", delivery.CodeUnavailable)
		require.Equal(t, exitDeclined, r.code, "no answer is no")
		require.Equal(t, relay.StateDead, w.wait(t, w.outage).State)

		r = w.tidings(t, nil, "reemit", "--code", "template.unknown", "--yes")
		require.Equal(t, exitNone, r.code)
	})

	// Ctrl-C at the question is no, at once: the signal ends the
	// command's context, and nobody has to answer.
	t.Run("InterruptedAtTheQuestion", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		stdin, typist := io.Pipe() // a terminal nobody types at
		defer typist.Close()
		ctx, interrupt := context.WithCancel(t.Context())
		var out, errOut logbuf.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"reemit", "--code", delivery.CodeUnavailable, "--database", w.dsn, "--schema", w.schema},
				func(string) string { return "" }, pipeTerminal{stdin}, &out, &errOut)
		}()
		asked := func() bool { return strings.Contains(errOut.String(), "[y/N]") }
		if code, ended := waitUntil(t, asked, done, "the question"); ended {
			t.Fatalf("reemit ended (%d) before it asked: %s", code, errOut.String())
		}
		interrupt()
		require.Equal(t, exitDeclined, testwait.Recv(t, done, "the command to end after the interrupt"))
		require.Equal(t, relay.StateDead, w.wait(t, w.outage).State, "nothing re-emitted")
	})

	// What the question showed is what is re-emitted: a request that
	// dies of the same cause while it waits for its answer stays dead.
	t.Run("DeathsAfterTheQuestionStayDead", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		later, err := w.client.Stage(t.Context(), w.db, module, notification.Request{Channel: "sms", Recipient: gracePhone,
			Template: "code", NotBefore: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		stdin, typist := io.Pipe()
		defer typist.Close()
		var out, errOut logbuf.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(t.Context(), []string{"reemit", "--code", delivery.CodeUnavailable, "--database", w.dsn, "--schema", w.schema},
				func(string) string { return "" }, pipeTerminal{stdin}, &out, &errOut)
		}()
		asked := func() bool { return strings.Contains(errOut.String(), "[y/N]") }
		if code, ended := waitUntil(t, asked, done, "the question"); ended {
			t.Fatalf("reemit ended (%d) before it asked: %s", code, errOut.String())
		}
		require.Contains(t, errOut.String(), "Re-emit these 1 requests?")
		_, err = w.db.ExecContext(t.Context(), `UPDATE "`+w.schema+`".outbox SET failed_at = clock_timestamp(),
			failure_reason = 'provider down', code = $2 WHERE id = $1`, later, delivery.CodeUnavailable)
		require.NoError(t, err)
		_, err = io.WriteString(typist, "y\n")
		require.NoError(t, err)
		require.Equal(t, exitOK, testwait.Recv(t, done, "the command to end after the answer"), errOut.String())
		require.Contains(t, out.String(), "re-emitted 1 requests")
		st, err := w.client.Status(t.Context(), later)
		require.NoError(t, err)
		require.Equal(t, relay.StateDead, st.State, "died after the question: not re-emitted")
	})

	t.Run("AskedAndConfirmedIsDelivered", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		r := w.tidings(t, typing("y\n"), "reemit", "--channel", "sms", "--code", delivery.CodeUnavailable, "--since", "1h")
		require.Equal(t, exitOK, r.code, r.errOut)
		require.Contains(t, r.out, "re-emitted 1 requests")
		st := w.wait(t, w.outage)
		require.Equal(t, relay.StateProcessed, st.State, "the outage is over: the recording now delivers")
		require.Equal(t, relay.StateDead, w.wait(t, w.invalid).State, "another cause stays dead")
		require.Equal(t, 2, w.sms.Count(w.outage), "handed again, under the same id")
	})

	t.Run("ByIDsWithYes", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		r := w.tidings(t, nil, "reemit", w.invalid.String(), "--yes", "--json")
		require.Equal(t, exitOK, r.code, r.errOut)
		var got reemitReport
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.EqualValues(t, 1, got.Matched)
		require.EqualValues(t, 1, got.Reemitted)
		require.Equal(t, relay.StateProcessed, w.wait(t, w.invalid).State)
		st, err := w.client.Status(t.Context(), w.outage)
		require.NoError(t, err)
		require.Equal(t, relay.StateDead, st.State, "only the id named")

		r = w.tidings(t, nil, "reemit", w.invalid.String(), w.outage.String(), "--yes", "--json")
		require.Equal(t, exitOK, r.code, r.errOut)
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.EqualValues(t, 1, got.Matched, "the one of the two still dead")
		require.EqualValues(t, 1, got.Reemitted)
		require.Equal(t, relay.StateProcessed, w.wait(t, w.outage).State)

		r = w.tidings(t, nil, "reemit", w.invalid.String(), "--yes")
		require.Equal(t, exitNone, r.code, "no longer dead")
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	w := setup(t)
	id, err := w.client.Stage(t.Context(), w.db, module, notification.Request{Channel: "mail", Recipient: adaMail,
		Template: "reminder", NotBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	r := w.tidings(t, nil, "cancel", id.String())
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Equal(t, "cancelled "+id.String()+"\n", r.out)
	st, err := w.client.Status(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, relay.StateCancelled, st.State)

	r = w.tidings(t, nil, "cancel", id.String(), "--json")
	require.Equal(t, exitNone, r.code, "cancelled already")
	require.JSONEq(t, `{"id": "`+id.String()+`", "cancelled": false, "state": "cancelled"}`, r.out)
	r = w.tidings(t, nil, "cancel", w.delivered.String())
	require.Equal(t, exitNone, r.code)
	require.Contains(t, r.errOut, "is processed, not pending")
	r = w.tidings(t, nil, "cancel", uuid.New().String())
	require.Equal(t, exitNone, r.code)
	r = w.tidings(t, nil, "cancel")
	require.Equal(t, exitUsage, r.code)

	// The cancel takes the claim a delivery would, as the consumer named:
	// a dispatcher with a consumer of its own is kept out by it.
	other, err := w.client.Stage(t.Context(), w.db, module, notification.Request{Channel: "mail", Recipient: adaMail,
		Template: "reminder", NotBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	r = w.tidings(t, nil, "cancel", other.String(), "--consumer", "billing_notify")
	require.Equal(t, exitOK, r.code, r.errOut)
	var consumer string
	require.NoError(t, w.db.QueryRowContext(t.Context(), `SELECT consumer FROM "`+w.schema+`".inbox WHERE event_id = $1`,
		other).Scan(&consumer))
	require.Equal(t, "billing_notify", consumer)
}

// suppressions lists what is suppressed without addresses unless asked,
// or the one address named, a page at a time; lift removes a
// suppression of the scope it names.
func TestSuppressionsAndLift(t *testing.T) {
	t.Parallel()
	w := setup(t)
	tx, err := w.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	for _, s := range []notification.Suppression{
		{Channel: "mail", Address: adaMail, Class: feedback.ClassPermanent, Reason: feedback.CodeBouncePermanent, Provider: "resend",
			Source: "msg_1"},
		{Channel: "sms", Address: gracePhone, Scope: "marketing"},
	} {
		require.NoError(t, w.client.Suppress(t.Context(), tx, s))
	}
	require.NoError(t, tx.Commit())

	r := w.tidings(t, nil, "suppressions")
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Contains(t, r.out, "bounce.permanent")
	require.Contains(t, r.out, "marketing")
	require.NotContains(t, r.out, adaMail, "addresses are personal data")
	require.NotContains(t, r.out, gracePhone)
	r = w.tidings(t, nil, "suppressions", "--json")
	require.Equal(t, exitOK, r.code, r.errOut)
	require.NotContains(t, r.out, adaMail, "nor in JSON")
	require.Contains(t, r.out, `"reason": "bounce.permanent"`)
	r = w.tidings(t, nil, "suppressions", "--limit", "1", "--json")
	require.Equal(t, exitOK, r.code, r.errOut)
	require.NotContains(t, r.out, adaMail, "nor in the cursor of the next page")
	require.Contains(t, r.errOut, "the next page needs --show-addresses")

	r = w.tidings(t, nil, "suppressions", "--show-addresses", "--limit", "1", "--json")
	require.Equal(t, exitOK, r.code, r.errOut)
	var page struct {
		Suppressions []map[string]any `json:"suppressions"`
		NextAfter    string           `json:"next_after"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &page))
	require.Len(t, page.Suppressions, 1)
	require.Equal(t, adaMail, page.Suppressions[0]["address"])
	require.Equal(t, "permanent", page.Suppressions[0]["class"])
	require.Equal(t, "mail//"+adaMail, page.NextAfter)
	r = w.tidings(t, nil, "suppressions", "--show-addresses", "--after", page.NextAfter)
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Contains(t, r.out, gracePhone)
	require.NotContains(t, r.out, adaMail, "the next page")

	r = w.tidings(t, nil, "suppressions", "--channel", "mail", "--address", strings.ToUpper(adaMail))
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Contains(t, r.out, adaMail, "the address named is shown, normalised")
	r = w.tidings(t, nil, "suppressions", "--address", adaMail)
	require.Equal(t, exitUsage, r.code)

	r = w.tidings(t, nil, "lift", "--channel", "sms", gracePhone)
	require.Equal(t, exitNone, r.code, "suppressed in scope marketing only")
	r = w.tidings(t, nil, "lift", "--channel", "sms", "--scope", "marketing", gracePhone)
	require.Equal(t, exitOK, r.code, r.errOut)
	r = w.tidings(t, nil, "lift", "--channel", "mail", adaMail, "--json")
	require.Equal(t, exitOK, r.code, r.errOut)
	require.JSONEq(t, `{"lifted": true}`, r.out)
	r = w.tidings(t, nil, "suppressions")
	require.Equal(t, exitNone, r.code, "nothing is suppressed any more")
	r = w.tidings(t, nil, "lift", "--channel", "Mail!", adaMail)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.errOut, "Channel")
	r = w.tidings(t, nil, "lift", adaMail)
	require.Equal(t, exitUsage, r.code)
}

func TestPurge(t *testing.T) {
	t.Parallel()
	w := setup(t)
	_, err := w.db.ExecContext(t.Context(), `UPDATE `+pq.QuoteIdentifier(w.schema)+`.outbox
		SET processed_at = now() - interval '8 days' WHERE id = $1`, w.delivered)
	require.NoError(t, err)

	r := w.tidings(t, nil, "purge", "--older-than", "7d")
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Contains(t, r.out, "purged 1 ")
	_, err = w.client.Status(t.Context(), w.delivered)
	require.ErrorIs(t, err, relay.ErrNotFound)
	r = w.tidings(t, nil, "purge", "--older-than", "7d", "--json")
	require.Equal(t, exitOK, r.code, r.errOut)
	require.JSONEq(t, `{"purged": 0}`, r.out, "dead requests are never purged")

	for _, args := range [][]string{{"purge"}, {"purge", "--older-than", "0s"}, {"purge", "--older-than", "a week"},
		{"purge", "--older-than", "infd"}, {"purge", "--older-than", "NaNd"}, {"purge", "--older-than", "1e9d"}} {
		r = w.tidings(t, nil, args...)
		require.Equal(t, exitUsage, r.code, "%v", args)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	w := setup(t)
	_, err := w.client.Stage(t.Context(), w.db, module, notification.Request{Channel: "mail", Recipient: adaMail,
		Template: "reminder", NotBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	r := w.tidings(t, nil, "stats")
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Regexp(t, module+`\s+mail\s+0\s+1\s+-\s+0`, r.out)
	require.Regexp(t, module+`\s+sms\s+0\s+0\s+-\s+2`, r.out)
	require.Regexp(t, module+`\s+sms\s+`+delivery.CodeInvalidRecipient+`\s+1`, r.out)
	require.Regexp(t, `per minute\s+0.2\s+0.4`, r.out, "one delivered and two dead in five minutes")
	requireNoRecipient(t, r.out)

	r = w.tidings(t, nil, "stats", "--module", module, "--minutes", "1", "--json")
	require.Equal(t, exitOK, r.code, r.errOut)
	var got statsView
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	require.Len(t, got.Lanes, 2)
	require.Len(t, got.Dead, 2)
	require.Equal(t, []minuteView{{Start: got.Minutes[0].Start, Processed: 1, Dead: 2}}, got.Minutes)

	r = w.tidings(t, nil, "stats", "--minutes", "61")
	require.Equal(t, exitUsage, r.code)
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("AppliesAsTheOwner", func(t *testing.T) {
		t.Parallel()
		// An empty schema, made and dropped by pgtest.
		schema := pgtest.Schema(t, func(ctx context.Context, db *sql.DB, schema string) error {
			_, err := db.ExecContext(ctx, `CREATE SCHEMA `+pq.QuoteIdentifier(schema))
			return err
		})
		admin := pgtest.AdminDB(t)
		for range 2 { // idempotent
			r := runCommand(t, map[string]string{"DATABASE_URL": pgtest.AdminURL(t)}, nil, "migrate", "--schema", schema, "--inapp")
			require.Equal(t, exitOK, r.code, r.errOut)
			require.Equal(t, "schema "+schema+" is up to date: relay, inbox, notification, inapp\n", r.out)
		}
		var tables []string
		require.NoError(t, admin.QueryRowContext(t.Context(), `SELECT array_agg(tablename::text ORDER BY tablename)
			FROM pg_tables WHERE schemaname = $1`, schema).Scan(pq.Array(&tables)))
		require.Subset(t, tables, []string{"outbox", "inbox", "timeline", "inapp_notifications"})
	})

	t.Run("PrintsFilesForEachTool", func(t *testing.T) {
		t.Parallel()
		for _, tool := range []string{"goose", "golang-migrate"} {
			dir := t.TempDir()
			r := runCommand(t, nil, nil, "migrate", "--print", tool, "--dir", dir, "--json")
			require.Equal(t, exitOK, r.code, r.errOut)
			var got struct {
				Files []string `json:"files"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.out), &got))
			components := map[string]bool{}
			for _, f := range got.Files {
				body, err := os.ReadFile(f)
				require.NoError(t, err)
				components[filepath.Base(filepath.Dir(f))] = true
				if tool == "goose" {
					require.Contains(t, string(body), "-- +goose Up")
				}
			}
			// Every component Migrate applies: the dispatcher reads the
			// recipient rules' tables in every claim.
			require.Equal(t, map[string]bool{"relay": true, "inbox": true, "notification": true}, components)
			r = runCommand(t, nil, nil, "migrate", "--print", tool, "--dir", dir)
			require.Equal(t, exitError, r.code, "never overwrites")
			require.Contains(t, r.errOut, "file exists")
		}
		r := runCommand(t, nil, nil, "migrate", "--print", "flyway", "--dir", t.TempDir())
		require.Equal(t, exitUsage, r.code)
	})
}

func TestConnection(t *testing.T) {
	t.Parallel()
	w := setup(t)
	r := runCommand(t, map[string]string{"DATABASE_URL": w.dsn}, nil, "dead", "--schema", w.schema, "--group-by", "module")
	require.Equal(t, exitOK, r.code, "DATABASE_URL when --database is absent: %s", r.errOut)

	r = runCommand(t, nil, nil, "stats")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.errOut, "pass --database or set DATABASE_URL")

	const secret = "s3cret-pw"
	r = runCommand(t, map[string]string{"DATABASE_URL": "postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2"}, nil, "stats", "-h")
	require.Equal(t, exitOK, r.code)
	require.NotContains(t, r.out, secret, "help shows no default holding a password")
	r = runCommand(t, map[string]string{"DATABASE_URL": "postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2&sslmode=disable"}, nil, "stats")
	require.Equal(t, exitError, r.code)
	require.NotContains(t, r.errOut, secret)
	r = runCommand(t, map[string]string{"DATABASE_URL": "host=h password=" + secret + " bogus"}, nil, "stats")
	require.Equal(t, exitUsage, r.code)
	require.NotContains(t, r.errOut, secret)

	r = runCommand(t, nil, nil, "stats", "--database", w.dsn, "--schema", "Bad-Schema")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.errOut, "Bad-Schema")
	notMigrated := runCommand(t, nil, nil, "stats", "--database", w.dsn, "--schema", "t_cmd_not_migrated")
	require.Equal(t, exitError, notMigrated.code)
	require.Contains(t, notMigrated.errOut, `Run "tidings migrate"`)

	r = runCommand(t, nil, nil, "frobnicate")
	require.Equal(t, exitUsage, r.code)
	r = runCommand(t, nil, nil)
	require.Equal(t, exitUsage, r.code)
	r = runCommand(t, nil, nil, "-h")
	require.Equal(t, exitOK, r.code)
	for _, c := range commands() {
		require.Contains(t, r.out, "  "+c.name+" ")
	}
}

// serve shows the web page of the schema on loopback until interrupted,
// read-only when asked; a bad port is a usage error.
func TestServe(t *testing.T) {
	t.Parallel()
	w := setup(t)
	r, status := serving(t, nil, "/", "serve", "--database", w.dsn, "--schema", w.schema)
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Equal(t, http.StatusOK, status)
	require.Regexp(t, `^serving http://127\.0\.0\.1:[0-9]+/ until interrupted\n$`, r.out)
	r, status = serving(t, nil, "/requests/"+w.invalid.String(), "serve", "--read-only", "--database", w.dsn, "--schema", w.schema)
	require.Equal(t, exitOK, r.code, r.errOut)
	require.Equal(t, http.StatusOK, status)

	r = w.tidings(t, nil, "serve", "--port", "70000")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.errOut, "Port 70000 is not a TCP port")
	r = runCommand(t, nil, nil, "serve")
	require.Equal(t, exitUsage, r.code, "no database")
}

// deadPage is a page of dead --json with args.
func (w *world) deadPage(t *testing.T, args ...string) (page struct {
	Dead      []deadView `json:"dead"`
	NextAfter string     `json:"next_after"`
}) {
	t.Helper()
	r := w.tidings(t, nil, append([]string{"dead", "--json"}, args...)...)
	require.Equal(t, exitOK, r.code, r.errOut)
	require.NoError(t, json.Unmarshal([]byte(r.out), &page))
	return page
}
