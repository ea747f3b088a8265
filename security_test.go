package tidings_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/webhook"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
)

// ---------------------------------------------------------------------
// Names: schema, module, consumer and channel names are checked, never
// pasted, and a bad one is a clear error that names the field.
// ---------------------------------------------------------------------

// secBadNames are names no entry point may accept: each would need quoting,
// or breaks out of a quoted one, or is not what it looks like.
var secBadNames = []struct{ what, name string }{
	{"DoubleQuoteInjection", `a"; drop table x;--`},
	{"SingleQuoteInjection", `x'; select pg_sleep(10);--`},
	{"Dot", "a.b"},
	{"UpperCase", "Upper"},
	{"64Bytes", strings.Repeat("a", 64)},
	{"Empty", ""},
	{"Unicode", "naïve"},
	{"Homoglyph", "t\u0456dings"}, // a Cyrillic i
	{"NUL", "a\x00b"},
	{"LeadingSpace", " tidings"},
	{"InnerSpace", "a b"},
	{"TrailingNewline", "tidings\n"},
	{"LeadingDigit", "1abc"},
	{"Dollar", "a$1"}, // PostgreSQL takes it unquoted; the library does not
	{"InvalidUTF8", "a\xffb"},
}

// secNameBundle is what the entry points of TestNames run against: a migrated
// schema of the test's own.
type secNameBundle struct {
	db     *sql.DB
	schema string
	ob     *relay.Outbox
	ib     *inbox.Inbox
}

// secNameEntry is one way a name gets into the library.
type secNameEntry struct {
	entry string // how the name goes in
	field string // what the error must name
	also  string // more the error must say, such as the index of a batch
	// sentinel the error must wrap; nil for the Migrate and constructor
	// functions, whose errors have none.
	sentinel error
	// emptyIsDefault: "" means the default schema, which is not an error;
	// such an entry is not called with "".
	emptyIsDefault bool
	call           func(ctx context.Context, b secNameBundle, name string) error
}

// secAnyDelivery is a delivery for configurations that never deliver.
var secAnyDelivery = delivery.Func(func(context.Context, delivery.Pending) delivery.Outcome {
	return delivery.Delivered()
})

// secNameEntries returns every entry point that takes a name. A relay that
// wrongly starts with a bad name counts its hands in handed.
func secNameEntries(handed *atomic.Int64) []secNameEntry {
	msg := func(module string) relay.Message {
		return relay.Message{Module: module, Kind: "order.placed", Payload: []byte(`{"n":1}`)}
	}
	req := func(channel string) notification.Request {
		return notification.Request{Channel: channel, Recipient: "a@example.com"}
	}
	// A sink that must never be called: a bad name starts nothing.
	sink := relay.SinkFunc(func(context.Context, relay.Record) relay.Result {
		handed.Add(1)
		return relay.Done()
	})
	supervise := func(ctx context.Context, db *sql.DB, cfg relay.Config) error {
		// A relay that wrongly starts runs until ctx ends and returns nil.
		cfg.SweepInterval = time.Hour
		return relay.Supervise(ctx, db, &cfg, sink)
	}
	dispatcher := func(cfg notification.Config) error {
		_, err := notification.NewDispatcher(&cfg)
		return err
	}
	return []secNameEntry{
		{entry: "tidings.Migrate", field: "schema", emptyIsDefault: true,
			call: func(ctx context.Context, b secNameBundle, name string) error { return tidings.Migrate(ctx, b.db, name) }},
		{entry: "relay.Migrate", field: "schema", emptyIsDefault: true,
			call: func(ctx context.Context, b secNameBundle, name string) error { return relay.Migrate(ctx, b.db, name) }},
		{entry: "inbox.Migrate", field: "schema", emptyIsDefault: true,
			call: func(ctx context.Context, b secNameBundle, name string) error { return inbox.Migrate(ctx, b.db, name) }},
		{entry: "relay.NewOutbox", field: "schema", emptyIsDefault: true,
			call: func(_ context.Context, _ secNameBundle, name string) error {
				_, err := relay.NewOutbox(&relay.OutboxConfig{Schema: name})
				return err
			}},
		{entry: "relay.Supervise Config.Schema", field: "Schema", sentinel: relay.ErrConfig, emptyIsDefault: true,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				return supervise(ctx, b.db, relay.Config{Module: "orders", Schema: name})
			}},
		{entry: "relay.Supervise Config.Module", field: "Module", sentinel: relay.ErrConfig,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				return supervise(ctx, b.db, relay.Config{Module: name, Schema: b.schema})
			}},
		{entry: "relay.Outbox.Stage Message.Module", field: "Module", sentinel: relay.ErrInvalidMessage,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := b.ob.Stage(ctx, b.db, msg(name))
				return err
			}},
		{entry: "relay.Outbox.StageBatch Message.Module", field: "Module", also: "messages[1]", sentinel: relay.ErrInvalidMessage,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := b.ob.StageBatch(ctx, b.db, []relay.Message{msg("orders"), msg(name)})
				return err
			}},
		{entry: "relay.Stage Message.Module", field: "Module", sentinel: relay.ErrInvalidMessage,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := relay.Stage(ctx, b.db, msg(name))
				return err
			}},
		{entry: "inbox.New", field: "schema", emptyIsDefault: true,
			call: func(_ context.Context, _ secNameBundle, name string) error { _, err := inbox.New(name); return err }},
		{entry: "inbox.Inbox.Once consumer", field: "consumer", sentinel: inbox.ErrInvalid,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := b.ib.Once(ctx, b.db, name, uuid.Must(uuid.NewV7()))
				return err
			}},
		{entry: "inbox.Once consumer", field: "consumer", sentinel: inbox.ErrInvalid,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := inbox.Once(ctx, b.db, name, uuid.Must(uuid.NewV7()))
				return err
			}},
		{entry: "notification.Config.Consumer", field: "Consumer", sentinel: notification.ErrConfig, emptyIsDefault: true,
			call: func(_ context.Context, _ secNameBundle, name string) error {
				return dispatcher(notification.Config{Consumer: name, Deliveries: map[string]delivery.Delivery{"mail": secAnyDelivery}})
			}},
		{entry: "notification.Config.Deliveries channel", field: "Deliveries channel", sentinel: notification.ErrConfig,
			call: func(_ context.Context, _ secNameBundle, name string) error {
				return dispatcher(notification.Config{Deliveries: map[string]delivery.Delivery{name: secAnyDelivery}})
			}},
		{entry: "notification.ClientConfig.Schema", field: "schema", sentinel: notification.ErrConfig, emptyIsDefault: true,
			call: func(_ context.Context, b secNameBundle, name string) error {
				_, err := notification.NewClient(b.db, &notification.ClientConfig{Schema: name})
				return err
			}},
		{entry: "notification.ClientConfig.Consumer", field: "Consumer", sentinel: notification.ErrConfig, emptyIsDefault: true,
			call: func(_ context.Context, b secNameBundle, name string) error {
				_, err := notification.NewClient(b.db, &notification.ClientConfig{Consumer: name})
				return err
			}},
		{entry: "notification.Request.Message Channel", field: "Channel", sentinel: notification.ErrInvalidRequest,
			call: func(_ context.Context, _ secNameBundle, name string) error {
				_, err := req(name).Message("hr")
				return err
			}},
		{entry: "notification.Stage Request.Channel", field: "Channel", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := notification.Stage(ctx, b.db, "hr", req(name))
				return err
			}},
		{entry: "notification.Stage module", field: "module", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := notification.Stage(ctx, b.db, name, req("mail"))
				return err
			}},
		{entry: "notification.StageBatch Request.Channel", field: "Channel", also: "requests[1]", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				_, err := notification.StageBatch(ctx, b.db, "hr", []notification.Request{req("mail"), req(name)})
				return err
			}},
		{entry: "notification.Request.Message module", field: "module", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b secNameBundle, name string) error {
				m, err := req("mail").Message(name)
				if err != nil {
					return err
				}
				_, err = b.ob.Stage(ctx, b.db, m)
				return err
			}},
	}
}

// secCatalog lists the server's schemas, relations, functions, roles and
// databases, leaving out what other tests create and drop meanwhile:
// schemas named t_... (and the toast tables of their tables), temporary
// schemas, and the application roles of other test binaries sharing the
// server (see pgtest.EnvURL).
func secCatalog(t *testing.T, db *sql.DB) []string {
	t.Helper()
	const others = `n.nspname NOT LIKE 't\_%' AND n.nspname NOT LIKE 'pg\_temp\_%'
		AND n.nspname NOT LIKE 'pg\_toast%'`
	rows, err := db.QueryContext(context.Background(), `
		SELECT 'schema ' || n.nspname FROM pg_catalog.pg_namespace n
			WHERE n.nspname NOT LIKE 't\_%' AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
		UNION ALL
		SELECT 'relation ' || n.nspname || '.' || c.relname FROM pg_catalog.pg_class c
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE `+others+`
		UNION ALL
		SELECT 'function ' || n.nspname || '.' || p.proname FROM pg_catalog.pg_proc p
			JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE `+others+`
		UNION ALL
		SELECT 'role ' || rolname FROM pg_catalog.pg_roles WHERE rolname NOT LIKE 'tidings\_app\_%'
		UNION ALL
		SELECT 'database ' || datname FROM pg_catalog.pg_database
		ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var objects []string
	for rows.Next() {
		var o string
		require.NoError(t, rows.Scan(&o))
		objects = append(objects, o)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, objects)
	return objects
}

// TestNames calls every entry point that takes a schema, module, consumer
// or channel name with each of secBadNames: each answers with an error that
// names the field and says what is wrong with the name, and none of them
// creates, drops or changes anything on the server.
func TestNames(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	schema := pgtest.Schema(t, tidings.Migrate)
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	ib, err := inbox.New(schema)
	require.NoError(t, err)
	b := secNameBundle{db: db, schema: schema, ob: ob, ib: ib}

	before := secCatalog(t, db)
	ownTables := tables(t, db, schema)
	var handed atomic.Int64
	t.Cleanup(func() {
		// Runs once every subtest is done.
		require.Zero(t, handed.Load(), "a relay with a bad name handed a record")
		require.Equal(t, before, secCatalog(t, db), "a bad name created, dropped or renamed an object")
		require.Equal(t, ownTables, tables(t, db, schema))
		for _, table := range []string{"outbox", "inbox"} {
			var n int
			require.NoError(t, db.QueryRowContext(context.Background(),
				`SELECT count(*) FROM "`+schema+`".`+table).Scan(&n))
			require.Zero(t, n, "a bad name wrote to the %s", table)
		}
	})

	for _, e := range secNameEntries(&handed) {
		t.Run(strings.ReplaceAll(e.entry, " ", "_"), func(t *testing.T) {
			t.Parallel()
			for _, bad := range secBadNames {
				if bad.name == "" && e.emptyIsDefault {
					continue
				}
				t.Run(bad.what, func(t *testing.T) {
					t.Parallel()
					// Long enough for a round trip, too short for an
					// injected pg_sleep(10) to pass unnoticed.
					ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
					defer cancel()
					start := time.Now()
					err := e.call(ctx, b, bad.name)
					require.Error(t, err, "%s accepted %q", e.entry, bad.name)
					require.Less(t, time.Since(start), 5*time.Second)
					if e.sentinel != nil {
						require.ErrorIs(t, err, e.sentinel)
					}
					msg := err.Error()
					require.Contains(t, msg, e.field, "the error names the field")
					if e.also != "" {
						require.Contains(t, msg, e.also)
					}
					switch {
					case bad.name == "":
						require.Contains(t, msg, e.field+" is empty")
					case len(bad.name) > 63 && strings.EqualFold(e.field, "schema"):
						// A schema's NOTIFY channel needs 7 bytes more.
						require.Contains(t, msg, "64 bytes long, at most 56 allowed")
					case len(bad.name) > 63:
						require.Contains(t, msg, "64 bytes long, at most 63 allowed")
					default:
						require.Contains(t, msg, "is not allowed (use a lower-case letter or underscore first",
							"the error says what a name may hold")
						require.Contains(t, msg, strconv.Quote(bad.name), "the error quotes the name, escaped")
					}
					require.NotContains(t, msg, "pq:", "the name never reached the server")
				})
			}
		})
	}
}

// TestNamesAsDataAreParameters passes the injection strings where the
// library takes them as data (a record's kind, a dead-record filter, a
// request's recipient and template): they are bound as parameters and come
// back byte for byte.
func TestNamesAsDataAreParameters(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	schema := pgtest.Schema(t, tidings.Migrate)
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	before := secCatalog(t, db)

	for _, bad := range secBadNames[:2] {
		id, err := ob.Stage(t.Context(), db, relay.Message{Module: "orders", Kind: bad.name, Payload: []byte(`{}`)})
		require.NoError(t, err)
		st, err := ob.Status(t.Context(), db, id)
		require.NoError(t, err)
		require.Equal(t, bad.name, st.Kind)

		dead, err := ob.ListDead(t.Context(), db, &relay.DeadFilter{Module: bad.name, Kind: bad.name})
		require.NoError(t, err)
		require.Empty(t, dead)
		n, err := ob.Reemit(t.Context(), db, &relay.DeadFilter{Module: bad.name, Kind: bad.name})
		require.NoError(t, err)
		require.Zero(t, n)

		m, err := notification.Request{Channel: "mail", Recipient: bad.name, Template: bad.name,
			Data: map[string]any{bad.name: bad.name}}.Message("hr")
		require.NoError(t, err)
		id, err = ob.Stage(t.Context(), db, m)
		require.NoError(t, err)
		var recipient, template string
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT payload->>'recipient', payload->>'template'
			FROM "`+schema+`".outbox WHERE id = $1`, id).Scan(&recipient, &template))
		require.Equal(t, bad.name, recipient)
		require.Equal(t, bad.name, template)
	}
	require.Equal(t, before, secCatalog(t, db))
}

// secPlainIdent is the rule of DESIGN.md ("validated as an identifier"),
// written independently of internal/ident: what PostgreSQL takes unquoted
// and keeps as written.
var secPlainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// secExecer adapts a function to relay.Execer and inbox.Execer.
type secExecer func(ctx context.Context, query string, args ...any) (sql.Result, error)

func (f secExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return f(ctx, query, args...)
}

// errSecExecuted is what the fake Execer of FuzzNames answers: the name got
// past validation to a statement.
var errSecExecuted = errors.New("executed")

// FuzzNames gives every entry point that takes a name the same arbitrary
// name, without a database: they agree with each other and with
// secPlainIdent on what to accept, and each refusal wraps its sentinel, names
// the field and says why. A refused name never reaches a statement.
func FuzzNames(f *testing.F) {
	for _, bad := range secBadNames {
		f.Add(bad.name)
	}
	f.Add("tidings")
	f.Add("_")
	f.Add("a1_")
	f.Add(strings.Repeat("z", 63))
	f.Add("ǅ") // a title-case letter: neither upper nor lower
	f.Add("a\u200bb")
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: "tidings"})
	require.NoError(f, err)
	ib, err := inbox.New("tidings")
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, name string) {
		valid := secPlainIdent.MatchString(name)
		executed := false
		exec := secExecer(func(context.Context, string, ...any) (sql.Result, error) {
			executed = true
			return nil, errSecExecuted
		})
		deliveries := map[string]delivery.Delivery{"mail": secAnyDelivery}

		// A schema's NOTIFY channel (name + ".outbox") must fit 63 bytes too.
		validSchema := valid && len(name) <= 56
		check := func(entry, field string, sentinel error, emptyIsDefault bool, err error) {
			t.Helper()
			ok := valid
			if strings.EqualFold(field, "schema") {
				ok = validSchema
			}
			if ok || (name == "" && emptyIsDefault) {
				if err != nil {
					require.ErrorIs(t, err, errSecExecuted, "%s refused %q", entry, name)
				}
				return
			}
			require.Error(t, err, "%s accepted %q", entry, name)
			require.NotErrorIs(t, err, errSecExecuted, "%s ran a statement with %q", entry, name)
			if sentinel != nil {
				require.ErrorIs(t, err, sentinel, entry)
			}
			require.Contains(t, err.Error(), field, entry)
			require.Regexp(t, `is empty|bytes long|is not allowed`, err.Error(), entry)
		}

		_, err := relay.NewOutbox(&relay.OutboxConfig{Schema: name})
		check("relay.NewOutbox", "schema", nil, true, err)
		_, err = inbox.New(name)
		check("inbox.New", "schema", nil, true, err)
		_, err = notification.NewClient(nil, &notification.ClientConfig{Schema: name})
		check("notification.ClientConfig.Schema", "schema", notification.ErrConfig, true, err)
		_, err = notification.NewDispatcher(&notification.Config{Consumer: name, Deliveries: deliveries})
		check("notification.Config.Consumer", "Consumer", notification.ErrConfig, true, err)
		_, err = notification.NewDispatcher(&notification.Config{Consumer: "c",
			Deliveries: map[string]delivery.Delivery{name: secAnyDelivery}})
		check("notification.Config.Deliveries", "Deliveries channel", notification.ErrConfig, false, err)
		_, err = notification.Request{Channel: name, Recipient: "r"}.Message("m")
		check("notification.Request.Channel", "Channel", notification.ErrInvalidRequest, false, err)

		executed = false
		_, err = ob.Stage(t.Context(), exec, relay.Message{Module: name, Kind: "k", Payload: []byte(`{}`)})
		check("relay.Outbox.Stage", "Module", relay.ErrInvalidMessage, false, err)
		require.Equal(t, valid, executed)
		executed = false
		_, err = ob.StageBatch(t.Context(), exec, []relay.Message{{Module: name, Kind: "k", Payload: []byte(`{}`)}})
		check("relay.Outbox.StageBatch", "Module", relay.ErrInvalidMessage, false, err)
		require.Equal(t, valid, executed)
		executed = false
		_, err = ib.Once(t.Context(), exec, name, uuid.Must(uuid.NewV7()))
		check("inbox.Inbox.Once", "consumer", inbox.ErrInvalid, false, err)
		require.Equal(t, valid, executed)

		if !valid {
			// Only a refused name may meet a nil pool: Supervise and
			// Migrate check names before any round trip.
			err = relay.Supervise(t.Context(), nil, &relay.Config{Module: name}, relay.SinkFunc(
				func(context.Context, relay.Record) relay.Result { return relay.Done() }))
			check("relay.Config.Module", "Module", relay.ErrConfig, false, err)
			if name != "" {
				err = relay.Supervise(t.Context(), nil, &relay.Config{Module: "m", Schema: name}, relay.SinkFunc(
					func(context.Context, relay.Record) relay.Result { return relay.Done() }))
				check("relay.Config.Schema", "Schema", relay.ErrConfig, false, err)
				check("tidings.Migrate", "schema", nil, false, tidings.Migrate(t.Context(), nil, name))
				check("relay.Migrate", "schema", nil, false, relay.Migrate(t.Context(), nil, name))
				check("inbox.Migrate", "schema", nil, false, inbox.Migrate(t.Context(), nil, name))
			}
		}
	})
}

// ---------------------------------------------------------------------
// Webhook signatures: what the module's own tests (delivery/webhook) do
// not already cover.
// ---------------------------------------------------------------------

// The shared test vector of the Standard Webhooks libraries
// (standard-webhooks/standard-webhooks, libraries/*/: TestWebhookSign,
// test_sign_function, "sign function works").
const (
	secVectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secVectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	secVectorTimestamp = 1614265330
	secVectorBody      = `{"test": 2432232314}`
	secVectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// An unrelated signature the libraries' tests use as a wrong one.
	secVectorOther = "Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

// secSign signs as the specification says, independently of the module:
// base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")).
func secSign(t *testing.T, secret, id string, timestamp int64, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// TestWebhookStandardScenarios runs the scenarios of the Standard Webhooks
// libraries' own test suites (Go webhook_test.go TestWebhook, JavaScript
// webhook.test.ts, Python test_webhooks.py) against Verify, around the
// shared vector: the receiver's clock is the vector's time.
func TestWebhookStandardScenarios(t *testing.T) {
	t.Parallel()
	at := time.Unix(secVectorTimestamp, 0)
	require.Equal(t, secVectorSignature, secSign(t, secVectorSecret, secVectorID, secVectorTimestamp, secVectorBody), "the independent signer")
	tolerance := int64(webhook.ToleranceDefault / time.Second)

	for _, tc := range []struct {
		name      string
		id        string
		timestamp string
		signature string
		want      error
	}{
		{name: "ValidSignatureIsValid", signature: secVectorSignature},
		{name: "MissingIDReturnsError", id: "-", signature: secVectorSignature, want: webhook.ErrMissingHeaders},
		{name: "MissingTimestampReturnsError", timestamp: "-", signature: secVectorSignature, want: webhook.ErrMissingHeaders},
		{name: "MissingSignatureReturnsError", signature: "-", want: webhook.ErrMissingHeaders},
		{name: "InvalidSignatureIsInvalid", signature: "v1," + secVectorOther, want: webhook.ErrSignature},
		{name: "InvalidSignatureNotBase64", signature: "v1,dawfeoifkpqwoekfpqoekf", want: webhook.ErrSignature},
		{name: "InvalidSignatureLastCharacter", signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=",
			want: webhook.ErrSignature},
		{name: "PartialSignature", signature: secVectorSignature[:8], want: webhook.ErrSignature},
		{name: "PartialSignatureVersionOnly", signature: "v1,", want: webhook.ErrSignature},
		{name: "ValidMultiSigIsValid", signature: strings.Join([]string{"v1," + secVectorOther, "v2," + secVectorOther, secVectorSignature,
			"v1," + secVectorOther}, " ")},
		{name: "InvalidTimestamp", timestamp: "hello", signature: secVectorSignature, want: webhook.ErrTimestamp},
		{name: "TimestampFrom2000", timestamp: strconv.FormatInt(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 10),
			signature: secVectorSignature, want: webhook.ErrTimestamp},
		{name: "OldTimestampFails", timestamp: strconv.FormatInt(secVectorTimestamp-tolerance-1, 10),
			signature: secSign(t, secVectorSecret, secVectorID, secVectorTimestamp-tolerance-1, secVectorBody), want: webhook.ErrTimestamp},
		{name: "NewTimestampFails", timestamp: strconv.FormatInt(secVectorTimestamp+tolerance+1, 10),
			signature: secSign(t, secVectorSecret, secVectorID, secVectorTimestamp+tolerance+1, secVectorBody), want: webhook.ErrTimestamp},
		{name: "OldTimestampAtTheEdgePasses", timestamp: strconv.FormatInt(secVectorTimestamp-tolerance, 10),
			signature: secSign(t, secVectorSecret, secVectorID, secVectorTimestamp-tolerance, secVectorBody)},
		{name: "NewTimestampAtTheEdgePasses", timestamp: strconv.FormatInt(secVectorTimestamp+tolerance, 10),
			signature: secSign(t, secVectorSecret, secVectorID, secVectorTimestamp+tolerance, secVectorBody)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for name, v := range map[string]string{
				webhook.HeaderID:        secOr(tc.id, secVectorID),
				webhook.HeaderTimestamp: secOr(tc.timestamp, strconv.Itoa(secVectorTimestamp)),
				webhook.HeaderSignature: tc.signature,
			} {
				if v != "-" {
					h.Set(name, v)
				}
			}
			err := webhook.Verify([]string{secVectorSecret}, h, []byte(secVectorBody), at, 0)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}

	// The libraries also accept the secret without its whsec_ prefix;
	// this module requires the prefix, and says so.
	t.Run("SecretWithoutPrefix", func(t *testing.T) {
		t.Parallel()
		h := http.Header{}
		h.Set(webhook.HeaderID, secVectorID)
		h.Set(webhook.HeaderTimestamp, strconv.Itoa(secVectorTimestamp))
		h.Set(webhook.HeaderSignature, secVectorSignature)
		err := webhook.Verify([]string{strings.TrimPrefix(secVectorSecret, "whsec_")}, h, []byte(secVectorBody), at, 0)
		require.ErrorIs(t, err, webhook.ErrInvalidSecret)
	})
}

func secOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// secCall is one request as the receiver got it.
type secCall struct {
	header http.Header
	body   []byte
}

// secReceiver is the endpoint the webhook package documentation asks
// receivers to write: verify, then deduplicate on webhook-id in the same
// transaction as the work (here the library's own inbox, keyed by the
// request id that webhook-id carries), and answer 2xx to a duplicate.
type secReceiver struct {
	db      *sql.DB
	ib      *inbox.Inbox
	secrets []string
	skew    time.Duration // the receiver's clock is ahead of the real one by this much
	url     string

	mu      sync.Mutex
	effects map[string]int // work done per webhook-id
	calls   []secCall
}

// startSecReceiver starts a secReceiver that deduplicates in ib, closed
// when the test ends.
func startSecReceiver(t *testing.T, ib *inbox.Inbox, secret string, skew time.Duration) *secReceiver {
	t.Helper()
	r := &secReceiver{db: pgtest.DB(t), ib: ib, secrets: []string{secret}, skew: skew, effects: map[string]int{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/hooks"
	return r
}

func (r *secReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.calls = append(r.calls, secCall{header: req.Header.Clone(), body: body})
	r.mu.Unlock()

	if err := webhook.Verify(r.secrets, req.Header, body, time.Now().Add(r.skew), 0); err != nil {
		http.Error(w, "invalid webhook", http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.HeaderID)
	event, err := uuid.Parse(id)
	if err != nil {
		http.Error(w, "webhook-id is not a request id", http.StatusBadRequest)
		return
	}
	tx, err := r.db.BeginTx(req.Context(), nil)
	if err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = tx.Rollback() }()
	first, err := r.ib.Once(req.Context(), tx, "receiver", event)
	if err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	if first {
		// The work would be done here, in the claim's transaction.
		if err := tx.Commit(); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		r.mu.Lock()
		r.effects[id]++
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusNoContent)
}

// call returns the first call the receiver got with webhook-id id.
func (r *secReceiver) call(t *testing.T, id string) secCall {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.header.Get(webhook.HeaderID) == id {
			return c
		}
	}
	t.Fatalf("no call with webhook-id %s", id)
	return secCall{}
}

func (r *secReceiver) callsOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.header.Get(webhook.HeaderID) == id {
			n++
		}
	}
	return n
}

func (r *secReceiver) effectsOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effects[id]
}

// secReplay sends a captured call to url again, with change applied to a
// copy of its header, and returns the status.
func secReplay(t *testing.T, url string, c secCall, change func(http.Header)) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(c.body))
	require.NoError(t, err)
	req.Header = c.header.Clone()
	if change != nil {
		change(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestWebhookReplayedIDs shows why Verify accepting a replay is safe when
// the receiver does what the documentation asks: the webhook-id is signed,
// so deduplicating on it stops redeliveries and replays alike, and a
// replay cannot get a fresh id, a fresh timestamp, another request's
// headers or a late pass.
func TestWebhookReplayedIDs(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, tidings.Migrate)
	ib, err := inbox.New(schema)
	require.NoError(t, err)
	secret := webhook.NewSecret()
	recv := startSecReceiver(t, ib, secret, 0)

	d, err := webhook.New(&webhook.Config{Secrets: []string{secret}})
	require.NoError(t, err)
	pending := func(template string) delivery.Pending {
		return delivery.Pending{ID: uuid.Must(uuid.NewV7()), Channel: "webhook", Recipient: recv.url,
			Template: template, Data: map[string]any{"invoice": "INV-17"}, Attempt: 1, StagedAt: time.Now()}
	}

	// The first delivery, and the same request delivered again (a crash
	// between the endpoint's answer and the dispatcher's commit).
	p := pending("invoice.paid")
	id := p.ID.String()
	require.Equal(t, delivery.KindDelivered, d.Deliver(t.Context(), p).Kind())
	p.Attempt = 2
	require.Equal(t, delivery.KindDelivered, d.Deliver(t.Context(), p).Kind())
	require.Equal(t, 2, recv.callsOf(id), "the same id on every attempt")
	require.Equal(t, 1, recv.effectsOf(id), "the redelivery is answered 2xx and does nothing")
	first := recv.call(t, id)
	t.Cleanup(func() {
		require.Equal(t, 1, recv.effectsOf(id), "one effect, whatever was replayed")
	})

	t.Run("WithinTheToleranceVerifiesAndIsIgnored", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, webhook.Verify([]string{secret}, first.header, first.body, time.Now(), 0),
			"Verify keeps no memory of ids, by design")
		require.Equal(t, http.StatusNoContent, secReplay(t, recv.url, first, nil))
	})
	t.Run("UnderAFreshIDFailsTheSignature", func(t *testing.T) {
		t.Parallel()
		fresh := uuid.Must(uuid.NewV7()).String()
		require.Equal(t, http.StatusUnauthorized, secReplay(t, recv.url, first, func(h http.Header) {
			h.Set(webhook.HeaderID, fresh)
		}))
		require.ErrorIs(t, webhook.Verify([]string{secret}, secWithHeader(first.header, webhook.HeaderID, fresh),
			first.body, time.Now(), 0), webhook.ErrSignature)
		require.Zero(t, recv.effectsOf(fresh))
	})
	t.Run("WithAFreshTimestampFailsTheSignature", func(t *testing.T) {
		t.Parallel()
		later := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
		require.Equal(t, http.StatusUnauthorized, secReplay(t, recv.url, first, func(h http.Header) {
			h.Set(webhook.HeaderTimestamp, later)
		}))
	})
	t.Run("TheBodyUnderAnotherRequestsHeadersFails", func(t *testing.T) {
		t.Parallel()
		other := pending("invoice.voided")
		require.Equal(t, delivery.KindDelivered, d.Deliver(t.Context(), other).Kind())
		swapped := secCall{header: recv.call(t, other.ID.String()).header, body: first.body}
		require.Equal(t, http.StatusUnauthorized, secReplay(t, recv.url, swapped, nil))
		require.Equal(t, 1, recv.effectsOf(other.ID.String()))
	})
	t.Run("AfterTheToleranceIsRefused", func(t *testing.T) {
		t.Parallel()
		// The same receiver, its clock past the tolerance.
		late := startSecReceiver(t, ib, secret, webhook.ToleranceDefault+2*time.Second)
		require.Equal(t, http.StatusUnauthorized, secReplay(t, late.url, first, nil))
		require.Zero(t, late.effectsOf(id))
		require.ErrorIs(t, webhook.Verify([]string{secret}, first.header, first.body,
			time.Now().Add(webhook.ToleranceDefault+2*time.Second), 0), webhook.ErrTimestamp)
	})
}

func secWithHeader(h http.Header, name, value string) http.Header {
	h = h.Clone()
	h.Set(name, value)
	return h
}

// TestWebhookVerifyComparesInConstantTime reads Verify's source: the
// signatures are compared with hmac.Equal (or subtle.ConstantTimeCompare),
// and never with ==, bytes.Equal or another comparison that stops at the
// first difference, anywhere in the signature code. Timing a comparison
// of 44 bytes in a test would only be noise.
func TestWebhookVerifyComparesInConstantTime(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "delivery/webhook/signature.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)

	var verify *ast.FuncDecl
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Verify" && fn.Recv == nil {
			verify = fn
		}
	}
	require.NotNil(t, verify, "Verify is in signature.go")

	constantTime, variableTime := 0, []string{}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, _ := sel.X.(*ast.Ident)
		if pkg == nil {
			return true
		}
		switch pkg.Name + "." + sel.Sel.Name {
		case "hmac.Equal", "subtle.ConstantTimeCompare":
			if verify.Pos() <= call.Pos() && call.End() <= verify.End() {
				constantTime++
			}
		case "bytes.Equal", "bytes.Compare", "strings.Compare", "strings.EqualFold", "reflect.DeepEqual", "slices.Equal":
			variableTime = append(variableTime, fset.Position(call.Pos()).String())
		}
		return true
	})
	require.Positive(t, constantTime, "Verify compares signatures with hmac.Equal")
	require.Empty(t, variableTime, "a comparison that can stop early, in the signature code")

	// No == or != on the received signature or the expected MAC.
	suspects := map[string]bool{"signature": true, "want": true, "expected": true}
	ast.Inspect(verify.Body, func(n ast.Node) bool {
		bin, ok := n.(*ast.BinaryExpr)
		if !ok || (bin.Op != token.EQL && bin.Op != token.NEQ) {
			return true
		}
		for _, side := range []ast.Expr{bin.X, bin.Y} {
			ast.Inspect(side, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && suspects[id.Name] {
					t.Errorf("%s: %s compared with %s", fset.Position(bin.Pos()), id.Name, bin.Op)
				}
				return true
			})
		}
		return true
	})
}

// ---------------------------------------------------------------------
// Least privilege: the relay and the dispatcher need only DML on their own
// two tables; migrations need more and refuse to run without it.
// ---------------------------------------------------------------------

// secSchemaCounter numbers the schemas TestLeastPrivilege tries to migrate.
var secSchemaCounter atomic.Int64

// secLog is a log sink safe for the relay's goroutines.
type secLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *secLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *secLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestLeastPrivilege runs a relay and a dispatcher, end to end, connected
// as pgtest's application role, as every test is, with its grants narrowed
// to what a production relay gets: USAGE on the schema and DML on the
// outbox, the timeline and the inbox, nothing else. Stage, deliver, dead, list, re-emit,
// status, cancel and purge all work; and every migration refuses to run
// as that role, with a permission error, creating nothing.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	admin := pgtest.AdminDB(t)
	schema := pgtest.Schema(t, tidings.Migrate)
	role := pgtest.AppRole(t)
	// pgtest grants DML on every table of the schema; the library's own
	// bookkeeping of migrations is none of the relay's business.
	_, err := admin.ExecContext(t.Context(), `REVOKE ALL ON `+pq.QuoteIdentifier(schema)+`.migrations FROM `+pq.QuoteIdentifier(role))
	require.NoError(t, err)
	app, dsn := pgtest.Open(t, 10), pgtest.URL(t)

	var user string
	var super, createDB, createRole bool
	require.NoError(t, app.QueryRowContext(t.Context(), `SELECT current_user, rolsuper, rolcreatedb, rolcreaterole
		FROM pg_catalog.pg_roles WHERE rolname = current_user`).Scan(&user, &super, &createDB, &createRole))
	require.Equal(t, role, user)
	require.False(t, super || createDB || createRole, "the application role has an attribute beyond LOGIN")
	var privileges []string
	q := pq.QuoteIdentifier(schema)
	for _, check := range []string{
		`has_schema_privilege(` + pq.QuoteLiteral(schema) + `, 'CREATE')`,
		`has_database_privilege(current_database(), 'CREATE')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".outbox") + `, 'TRUNCATE, REFERENCES, TRIGGER')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".inbox") + `, 'TRUNCATE, REFERENCES, TRIGGER')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".timeline") + `, 'TRUNCATE, REFERENCES, TRIGGER')`,
		`has_table_privilege(` + pq.QuoteLiteral(q+".migrations") + `, 'SELECT, INSERT, UPDATE, DELETE')`,
	} {
		var has bool
		require.NoError(t, app.QueryRowContext(t.Context(), `SELECT `+check).Scan(&has), check)
		if has {
			privileges = append(privileges, check)
		}
	}
	require.Empty(t, privileges, "the application role has more than DML on its tables")
	_, err = app.ExecContext(t.Context(), `CREATE TABLE `+q+`.x (n int)`)
	pqErr, ok := errors.AsType[*pq.Error](err)
	require.True(t, ok, "CREATE in the schema: %v", err)
	require.Equal(t, pq.ErrorCode("42501"), pqErr.Code, "CREATE in the schema: %v", err)

	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	mail := recording.New()
	mail.ScriptRecipient("bounces@example.com", delivery.Reject(errors.New("mailbox does not exist")))
	d, err := notification.NewDispatcher(&notification.Config{Consumer: "app_notify",
		Deliveries: map[string]delivery.Delivery{"mail": mail}})
	require.NoError(t, err)
	client, err := notification.NewClient(app, &notification.ClientConfig{Schema: schema, Consumer: "app_notify"})
	require.NoError(t, err)

	var logs secLog
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- relay.Supervise(ctx, app, &relay.Config{Module: "app", Schema: schema, ListenDSN: dsn,
			HandTimeout: 5 * time.Second, Lease: 10 * time.Second, SweepInterval: time.Hour, GracePeriod: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, d)
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	wait := func(id uuid.UUID) notification.Status {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		st, err := client.Wait(ctx, id)
		require.NoError(t, err)
		return st
	}

	// Stage, in the application's transaction, as the role.
	tx, err := app.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	var msgs []relay.Message
	for _, r := range []notification.Request{
		{Channel: "mail", Recipient: "ada@example.com", Template: "welcome"},
		{Channel: "mail", Recipient: "bounces@example.com", Template: "welcome"},
		{Channel: "mail", Recipient: "later@example.com", Template: "reminder", NotBefore: time.Now().Add(time.Hour)},
	} {
		m, err := r.Message("app")
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	ids, err := ob.StageBatch(t.Context(), tx, msgs[:2])
	require.NoError(t, err)
	later, err := ob.Stage(t.Context(), tx, msgs[2])
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	delivered, bounced := ids[0], ids[1]

	require.Equal(t, relay.StateProcessed, wait(delivered).State)
	st := wait(bounced)
	require.Equal(t, relay.StateDead, st.State)
	require.Contains(t, st.Reason, "mailbox does not exist")

	dead, err := ob.ListDead(t.Context(), app, &relay.DeadFilter{Module: "app"})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, bounced, dead[0].ID)
	n, err := ob.Reemit(t.Context(), app, &relay.DeadFilter{IDs: []uuid.UUID{bounced}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, relay.StateProcessed, wait(bounced).State, "re-emitted, and delivered this time")
	require.Equal(t, 2, mail.Count(bounced))

	st, err = client.Status(t.Context(), later)
	require.NoError(t, err)
	require.Equal(t, relay.StatePending, st.State)
	st, err = client.Cancel(t.Context(), later)
	require.NoError(t, err)
	require.Equal(t, relay.StateCancelled, st.State)

	purged, err := ob.Purge(t.Context(), app, time.Microsecond)
	require.NoError(t, err)
	require.EqualValues(t, 3, purged, "processed and cancelled rows")
	_, err = ob.Status(t.Context(), app, delivered)
	require.ErrorIs(t, err, relay.ErrNotFound)
	_, err = d.Purge(t.Context()) // the inbox, at its retention
	require.NoError(t, err)
	ib, err := inbox.New(schema)
	require.NoError(t, err)
	claims, err := ib.Purge(t.Context(), app, time.Microsecond)
	require.NoError(t, err)
	require.EqualValues(t, 3, claims, "two deliveries and one cancel")

	for _, failure := range []string{"permission denied", "claim failed", "settle failed", "purge failed", "listen failed"} {
		require.NotContains(t, logs.String(), failure)
	}

	t.Run("MigrationsRefuse", func(t *testing.T) {
		t.Parallel()
		fresh := fmt.Sprintf("t_lp_%d_%d", os.Getpid(), secSchemaCounter.Add(1))
		t.Cleanup(func() {
			_, err := admin.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+pq.QuoteIdentifier(fresh)+` CASCADE`)
			require.NoError(t, err)
		})
		var versions int
		require.NoError(t, admin.QueryRowContext(t.Context(),
			`SELECT count(*) FROM `+pq.QuoteIdentifier(schema)+`.migrations`).Scan(&versions))

		for name, migrate := range map[string]pgtest.MigrateFunc{
			"tidings.Migrate": tidings.Migrate,
			"relay.Migrate":   relay.Migrate,
			"inbox.Migrate":   inbox.Migrate,
		} {
			for _, target := range []string{fresh, schema} {
				err := migrate(t.Context(), app, target)
				require.Error(t, err, "%s(%s) as %s", name, target, role)
				pqErr, ok := errors.AsType[*pq.Error](err)
				require.True(t, ok, "%s(%s): %v", name, target, err)
				require.Equal(t, pq.ErrorCode("42501"), pqErr.Code, "insufficient_privilege: %v", err)
				require.Contains(t, err.Error(), "permission denied")
			}
		}
		var exists bool
		require.NoError(t, admin.QueryRowContext(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, fresh).Scan(&exists))
		require.False(t, exists, "a refused migration created its schema")
		var after int
		require.NoError(t, admin.QueryRowContext(t.Context(),
			`SELECT count(*) FROM `+pq.QuoteIdentifier(schema)+`.migrations`).Scan(&after))
		require.Equal(t, versions, after)
		require.Equal(t, []string{"inbox", "migrations", "outbox", "timeline"}, tables(t, admin, schema))
	})
}
