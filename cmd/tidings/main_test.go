package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/logbuf"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
	"github.com/tidings-go/tidings/relay/relaytest"
	"github.com/tidings-go/tidings/retrypolicy"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const module = "bookings"

// The recipients of the world's requests: personal data, which no output
// shows unless asked.
const (
	adaMail     = "ada@example.com"
	adaPhone    = "+15005550001"
	gracePhone  = "+15005550002"
	correlation = "booking-1"
)

// world is a schema with a relay delivering through recordings, and the
// requests of one booking: a mail delivered, a text dead of an invalid
// number and a text dead of a provider outage.
type world struct {
	db        *sql.DB // the application role's
	dsn       string
	schema    string
	client    *notification.Client
	mail, sms *recording.Delivery

	delivered, invalid, outage uuid.UUID
}

func setup(t *testing.T) *world {
	t.Helper()
	w := &world{db: pgtest.DB(t), dsn: pgtest.URL(t), schema: pgtest.Schema(t, tidings.Migrate),
		mail: recording.New(), sms: recording.New()}
	var err error
	w.client, err = notification.NewClient(w.db, &notification.ClientConfig{Schema: w.schema})
	require.NoError(t, err)
	w.mail.ScriptRecipient(adaMail, delivery.DeliveredWithReference("msg-ada-1"))
	w.sms.ScriptRecipient(adaPhone, delivery.Reject(delivery.WithCode(delivery.CodeInvalidRecipient, errors.New("sms: not a valid phone number"))))
	w.sms.ScriptRecipient(gracePhone, delivery.Reject(delivery.WithCode(delivery.CodeUnavailable, errors.New("sms: provider answered 503"))))
	d, err := notification.NewDispatcher(&notification.Config{
		Deliveries: map[string]delivery.Delivery{"mail": w.mail, "sms": w.sms},
		Policy:     retrypolicy.Policy{BaseDelay: 50 * time.Millisecond, RandFunc: func() float64 { return 0 }},
	})
	require.NoError(t, err)
	relaytest.Supervise(t, w.db, relay.Config{Module: module, Schema: w.schema, Listener: pqlisten.New(w.dsn),
		HandTimeout: 5 * time.Second, SweepInterval: time.Hour, GracePeriod: 5 * time.Second}, d)

	ctx := relay.WithCorrelationID(t.Context(), correlation)
	ids, err := w.client.StageBatch(ctx, w.db, module, []notification.Request{
		{Channel: "mail", Recipient: adaMail, Template: "booking_confirmed"},
		{Channel: "sms", Recipient: adaPhone, Template: "booking_confirmed"},
		{Channel: "sms", Recipient: gracePhone, Template: "booking_confirmed"},
	})
	require.NoError(t, err)
	w.delivered, w.invalid, w.outage = ids[0], ids[1], ids[2]
	for _, id := range ids {
		w.wait(t, id)
	}
	return w
}

// wait waits, with a deadline, until id is settled.
func (w *world) wait(t *testing.T, id uuid.UUID) notification.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := w.client.Wait(ctx, id)
	require.NoError(t, err, "waiting for %s to settle", id)
	return st
}

// result is what one run of the command did.
type result struct {
	code        int
	out, errOut string
}

// tidings runs the command with args, the world's database and schema
// added, and stdin as its standard input (none when nil).
func (w *world) tidings(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	return runCommand(t, nil, stdin, append(args, "--database", w.dsn, "--schema", w.schema)...)
}

// runCommand runs the command with args and the environment env, as main
// would.
func runCommand(t *testing.T, env map[string]string, stdin io.Reader, args ...string) result {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, func(k string) string { return env[k] }, stdin, &out, &errOut)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// requireNoRecipient fails if s shows a recipient of the world.
func requireNoRecipient(t *testing.T, s string) {
	t.Helper()
	for _, r := range []string{adaMail, adaPhone, gracePhone} {
		require.NotContains(t, s, r, "a recipient is personal data")
	}
}

// waitUntil polls cond, a look at a running command's output, until it
// holds; it returns the command's exit code and true if the command ends
// first (done), and fails the test after testwait.Within, saying what it
// waited for.
func waitUntil(t *testing.T, cond func() bool, done <-chan int, what string) (code int, ended bool) {
	t.Helper()
	deadline := time.After(testwait.Within)
	for !cond() {
		select {
		case code := <-done:
			return code, true
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("waited %s for %s", testwait.Within, what)
		}
	}
	return 0, false
}

// pipeTerminal is a terminal nobody types at until the test says so.
type pipeTerminal struct{ *io.PipeReader }

func (pipeTerminal) Terminal() bool { return true }

// answering is a terminal at which a person types answer.
type answering struct{ *strings.Reader }

func (answering) Terminal() bool { return true }

func typing(answer string) answering { return answering{strings.NewReader(answer)} }

// serving runs the serve command with args and the environment env
// until it prints its address, then gets url+path from it, and stops it:
// it returns the command's result and the page's status.
func serving(t *testing.T, env map[string]string, path string, args ...string) (result, int) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var out, errOut logbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
	}()
	var url string
	listening := func() bool {
		_, rest, ok := strings.Cut(out.String(), "serving ")
		url, _, _ = strings.Cut(rest, " ")
		return ok && strings.HasSuffix(url, "/")
	}
	if code, ended := waitUntil(t, listening, done, "serve to print its address"); ended {
		return result{code: code, out: out.String(), errOut: errOut.String()}, 0
	}
	resp, err := http.Get(strings.TrimSuffix(url, "/") + path)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	stop()
	code := testwait.Recv(t, done, "serve to stop once interrupted")
	return result{code: code, out: out.String(), errOut: errOut.String()}, resp.StatusCode
}
