package tidings_test

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// Names: schema, module, consumer and channel names are checked, never
// pasted, and a bad one is a clear error that names the field.

// badNames are names no entry point may accept: each would need quoting,
// or breaks out of a quoted one, or is not what it looks like.
var badNames = []struct{ what, name string }{
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

// nameBundle is what the entry points of TestNames run against: a migrated
// schema of the test's own.
type nameBundle struct {
	db     *sql.DB
	schema string
	ob     *relay.Outbox
	ib     *inbox.Inbox
}

// nameEntry is one way a name gets into the library.
type nameEntry struct {
	entry string // how the name goes in
	field string // what the error must name
	also  string // more the error must say, such as the index of a batch
	// sentinel the error must wrap; nil for the Migrate and constructor
	// functions, whose errors have none.
	sentinel error
	// emptyIsDefault: "" means the default schema, which is not an error;
	// such an entry is not called with "".
	emptyIsDefault bool
	call           func(ctx context.Context, b nameBundle, name string) error
}

// anyDelivery is a delivery for configurations that never deliver.
var anyDelivery = delivery.Func(func(context.Context, delivery.Pending) delivery.Outcome {
	return delivery.Delivered()
})

// nameEntries returns every entry point that takes a name. A relay that
// wrongly starts with a bad name counts its hands in handed.
func nameEntries(handed *atomic.Int64) []nameEntry {
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
	return []nameEntry{
		{entry: "tidings.Migrate", field: "schema", emptyIsDefault: true,
			call: func(ctx context.Context, b nameBundle, name string) error { return tidings.Migrate(ctx, b.db, name) }},
		{entry: "relay.Migrate", field: "schema", emptyIsDefault: true,
			call: func(ctx context.Context, b nameBundle, name string) error { return relay.Migrate(ctx, b.db, name) }},
		{entry: "inbox.Migrate", field: "schema", emptyIsDefault: true,
			call: func(ctx context.Context, b nameBundle, name string) error { return inbox.Migrate(ctx, b.db, name) }},
		{entry: "relay.NewOutbox", field: "schema", emptyIsDefault: true,
			call: func(_ context.Context, _ nameBundle, name string) error {
				_, err := relay.NewOutbox(&relay.OutboxConfig{Schema: name})
				return err
			}},
		{entry: "relay.Supervise Config.Schema", field: "Schema", sentinel: relay.ErrConfig, emptyIsDefault: true,
			call: func(ctx context.Context, b nameBundle, name string) error {
				return supervise(ctx, b.db, relay.Config{Module: "orders", Schema: name})
			}},
		{entry: "relay.Supervise Config.Module", field: "Module", sentinel: relay.ErrConfig,
			call: func(ctx context.Context, b nameBundle, name string) error {
				return supervise(ctx, b.db, relay.Config{Module: name, Schema: b.schema})
			}},
		{entry: "relay.Outbox.Stage Message.Module", field: "Module", sentinel: relay.ErrInvalidMessage,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := b.ob.Stage(ctx, b.db, msg(name))
				return err
			}},
		{entry: "relay.Outbox.StageBatch Message.Module", field: "Module", also: "messages[1]", sentinel: relay.ErrInvalidMessage,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := b.ob.StageBatch(ctx, b.db, []relay.Message{msg("orders"), msg(name)})
				return err
			}},
		{entry: "relay.Stage Message.Module", field: "Module", sentinel: relay.ErrInvalidMessage,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := relay.Stage(ctx, b.db, msg(name))
				return err
			}},
		{entry: "inbox.New", field: "schema", emptyIsDefault: true,
			call: func(_ context.Context, _ nameBundle, name string) error { _, err := inbox.New(name); return err }},
		{entry: "inbox.Inbox.Once consumer", field: "consumer", sentinel: inbox.ErrInvalid,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := b.ib.Once(ctx, b.db, name, uuid.Must(uuid.NewV7()))
				return err
			}},
		{entry: "inbox.Once consumer", field: "consumer", sentinel: inbox.ErrInvalid,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := inbox.Once(ctx, b.db, name, uuid.Must(uuid.NewV7()))
				return err
			}},
		{entry: "notification.Config.Consumer", field: "Consumer", sentinel: notification.ErrConfig, emptyIsDefault: true,
			call: func(_ context.Context, _ nameBundle, name string) error {
				return dispatcher(notification.Config{Consumer: name, Deliveries: map[string]delivery.Delivery{"mail": anyDelivery}})
			}},
		{entry: "notification.Config.Deliveries channel", field: "Deliveries channel", sentinel: notification.ErrConfig,
			call: func(_ context.Context, _ nameBundle, name string) error {
				return dispatcher(notification.Config{Deliveries: map[string]delivery.Delivery{name: anyDelivery}})
			}},
		{entry: "notification.ClientConfig.Schema", field: "schema", sentinel: notification.ErrConfig, emptyIsDefault: true,
			call: func(_ context.Context, b nameBundle, name string) error {
				_, err := notification.NewClient(b.db, &notification.ClientConfig{Schema: name})
				return err
			}},
		{entry: "notification.ClientConfig.Consumer", field: "Consumer", sentinel: notification.ErrConfig, emptyIsDefault: true,
			call: func(_ context.Context, b nameBundle, name string) error {
				_, err := notification.NewClient(b.db, &notification.ClientConfig{Consumer: name})
				return err
			}},
		{entry: "notification.Request.Message Channel", field: "Channel", sentinel: notification.ErrInvalidRequest,
			call: func(_ context.Context, _ nameBundle, name string) error {
				_, err := req(name).Message("hr")
				return err
			}},
		{entry: "notification.Stage Request.Channel", field: "Channel", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := notification.Stage(ctx, b.db, "hr", req(name))
				return err
			}},
		{entry: "notification.Stage module", field: "module", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := notification.Stage(ctx, b.db, name, req("mail"))
				return err
			}},
		{entry: "notification.StageBatch Request.Channel", field: "Channel", also: "requests[1]", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b nameBundle, name string) error {
				_, err := notification.StageBatch(ctx, b.db, "hr", []notification.Request{req("mail"), req(name)})
				return err
			}},
		{entry: "notification.Request.Message module", field: "module", sentinel: notification.ErrInvalidRequest,
			call: func(ctx context.Context, b nameBundle, name string) error {
				m, err := req("mail").Message(name)
				if err != nil {
					return err
				}
				_, err = b.ob.Stage(ctx, b.db, m)
				return err
			}},
	}
}

// serverCatalog lists the server's schemas, relations, functions, roles and
// databases, leaving out what other tests create and drop meanwhile:
// schemas and roles named t_... (and the toast tables of their tables),
// temporary schemas, and the application roles of other test binaries
// sharing the server (see pgtest.EnvURL).
func serverCatalog(t *testing.T, db *sql.DB) []string {
	t.Helper()
	const others = `n.nspname NOT LIKE 't\_%' AND n.nspname NOT LIKE 'pg\_temp\_%'
		AND n.nspname NOT LIKE 'pg\_toast%'`
	objects := texts(t, db, `
		SELECT 'schema ' || n.nspname FROM pg_catalog.pg_namespace n
			WHERE n.nspname NOT LIKE 't\_%' AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
		UNION ALL
		SELECT 'relation ' || n.nspname || '.' || c.relname FROM pg_catalog.pg_class c
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE `+others+`
		UNION ALL
		SELECT 'function ' || n.nspname || '.' || p.proname FROM pg_catalog.pg_proc p
			JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE `+others+`
		UNION ALL
		SELECT 'role ' || rolname FROM pg_catalog.pg_roles
			WHERE rolname NOT LIKE 'tidings\_app\_%' AND rolname NOT LIKE 't\_%'
		UNION ALL
		SELECT 'database ' || datname FROM pg_catalog.pg_database
		ORDER BY 1`)
	require.NotEmpty(t, objects)
	return objects
}

// requireSameCatalog fails, naming only the objects that differ, unless
// the server's catalog is still before.
func requireSameCatalog(t *testing.T, db *sql.DB, before []string, msg string) {
	t.Helper()
	count := map[string]int{}
	for _, o := range before {
		count[o]++
	}
	for _, o := range serverCatalog(t, db) {
		count[o]--
	}
	var changed []string
	for o, n := range count {
		switch {
		case n > 0:
			changed = append(changed, "gone: "+o)
		case n < 0:
			changed = append(changed, "new: "+o)
		}
	}
	slices.Sort(changed)
	require.Empty(t, changed, msg)
}

// TestNames calls every entry point that takes a schema, module, consumer
// or channel name with each of badNames: each answers with an error that
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
	b := nameBundle{db: db, schema: schema, ob: ob, ib: ib}

	before := serverCatalog(t, db)
	ownTables := tables(t, db, schema)
	var handed atomic.Int64
	t.Cleanup(func() {
		// Runs once every subtest is done.
		require.Zero(t, handed.Load(), "a relay with a bad name handed a record")
		requireSameCatalog(t, db, before, "a bad name created, dropped or renamed an object")
		require.Equal(t, ownTables, tables(t, db, schema))
		for _, table := range []string{"outbox", "inbox"} {
			var n int
			require.NoError(t, db.QueryRowContext(context.Background(),
				`SELECT count(*) FROM "`+schema+`".`+table).Scan(&n))
			require.Zero(t, n, "a bad name wrote to the %s", table)
		}
	})

	for _, e := range nameEntries(&handed) {
		t.Run(strings.ReplaceAll(e.entry, " ", "_"), func(t *testing.T) {
			t.Parallel()
			for _, bad := range badNames {
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
	before := serverCatalog(t, db)

	for _, bad := range badNames[:2] {
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
	requireSameCatalog(t, db, before, "a name passed as data created, dropped or renamed an object")
}

// plainIdent is the rule of DESIGN.md ("validated as an identifier"),
// written independently of internal/ident: what PostgreSQL takes unquoted
// and keeps as written.
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// execer adapts a function to dbtx.Execer.
type execer func(ctx context.Context, query string, args ...any) (sql.Result, error)

func (f execer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return f(ctx, query, args...)
}

// errExecuted is what the fake Execer of FuzzNames answers: the name got
// past validation to a statement.
var errExecuted = errors.New("executed")

// FuzzNames gives every entry point that takes a name the same arbitrary
// name, without a database: they agree with each other and with
// plainIdent on what to accept, and each refusal wraps its sentinel, names
// the field and says why. A refused name never reaches a statement.
func FuzzNames(f *testing.F) {
	for _, bad := range badNames {
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
		valid := plainIdent.MatchString(name)
		executed := false
		exec := execer(func(context.Context, string, ...any) (sql.Result, error) {
			executed = true
			return nil, errExecuted
		})
		deliveries := map[string]delivery.Delivery{"mail": anyDelivery}

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
					require.ErrorIs(t, err, errExecuted, "%s refused %q", entry, name)
				}
				return
			}
			require.Error(t, err, "%s accepted %q", entry, name)
			require.NotErrorIs(t, err, errExecuted, "%s ran a statement with %q", entry, name)
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
			Deliveries: map[string]delivery.Delivery{name: anyDelivery}})
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
