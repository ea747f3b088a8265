package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
)

func TestStage(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, testStage)
}

func testStage(t *testing.T, _ drivertest.Driver) {

	t.Run("CommittedRowHasIDHeadersAndChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := relay.WithCorrelationID(t.Context(), "req-42")
		ctx = relay.WithCausationID(ctx, "cause-1")
		var id uuid.UUID
		require.NoError(t, b.native.InTx(ctx, func(tx dbtx.Execer) (err error) {
			id, err = b.ob.Stage(ctx, tx, relay.Message{Module: module, Kind: "order.placed", Payload: payload(1)})
			return err
		}))
		require.Equal(t, 7, int(id.Version()), "ids are UUIDv7")

		var kind, corr, cause string
		var body json.RawMessage
		require.NoError(t, b.db.QueryRowContext(ctx, `SELECT kind, payload, correlation_id, causation_id FROM "`+b.schema+`".outbox WHERE id = $1`, id).
			Scan(&kind, &body, &corr, &cause))
		require.Equal(t, "order.placed", kind)
		require.JSONEq(t, `{"n":1}`, string(body))
		require.Equal(t, "req-42", corr)
		require.Equal(t, "cause-1", cause)
	})

	t.Run("WithoutCorrelationTheRowStartsAChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, err := b.ob.Stage(t.Context(), b.native.Execer(), relay.Message{Module: module, Kind: "k", Payload: payload(1)})
		require.NoError(t, err)
		b.eventually(t, "correlation_id = '"+id.String()+"' AND causation_id = ''", 1, time.Second)
	})

	t.Run("G1RolledBackLeavesNoRowAndNothingIsHanded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := newRecorder(nil)
		supervise(t, b.db, b.config(t), sink)

		errRollBack := errors.New("roll back")
		require.ErrorIs(t, b.native.InTx(t.Context(), func(tx dbtx.Execer) error {
			_, err := b.ob.Stage(t.Context(), tx, relay.Message{Module: module, Kind: "k", Payload: payload(1)})
			require.NoError(t, err)
			return errRollBack
		}), errRollBack)
		// A committed record staged after it is handed: once it is, the
		// rolled-back one has had every chance to be handed too.
		ids := b.stage(t, 1)
		sink.waitHands(t, 1, 10*time.Second)
		require.Equal(t, 1, sink.handsOf(ids[0]))
		require.Equal(t, 1, sink.total())
		require.Equal(t, 1, b.count(t, "true"))
	})

	t.Run("BatchStagesAllInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.stage(t, 3)
		require.Len(t, ids, 3)
		for i, id := range ids {
			var body json.RawMessage
			require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT payload FROM "`+b.schema+`".outbox WHERE id = $1`, id).Scan(&body))
			require.JSONEq(t, string(payload(i)), string(body))
		}
	})

	t.Run("NotBeforeDelaysTheRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		at := time.Now().Add(time.Hour)
		_, err := b.ob.Stage(t.Context(), b.native.Execer(), relay.Message{Module: module, Kind: "k", Payload: payload(1), NotBefore: at})
		require.NoError(t, err)
		require.Equal(t, 1, b.count(t, "available_at > now() + interval '59 minutes'"))
	})

	// Stage and StageBatch agree on a scheduled time in the past: due then,
	// which is now.
	t.Run("PastNotBeforeIsDueEitherWay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		past := relay.Message{Module: module, Kind: "k", Payload: payload(1), NotBefore: time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)}
		one, err := b.ob.Stage(t.Context(), b.native.Execer(), past)
		require.NoError(t, err)
		many, err := b.ob.StageBatch(t.Context(), b.native.Execer(), []relay.Message{past})
		require.NoError(t, err)
		for _, id := range []uuid.UUID{one, many[0]} {
			st, err := b.ob.Status(t.Context(), b.db, id)
			require.NoError(t, err)
			require.True(t, st.NextAttempt.Equal(past.NotBefore), "%s due at %s", id, st.NextAttempt)
		}
	})

	// A schema that was never migrated says what to do.
	t.Run("UnmigratedSchemaSaysToMigrate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: "never_migrated"})
		require.NoError(t, err)
		msg := relay.Message{Module: module, Kind: "k", Payload: payload(1)}
		_, err = ob.Stage(t.Context(), b.native.Execer(), msg)
		require.ErrorIs(t, err, relay.ErrNotMigrated)
		require.ErrorContains(t, err, `schema "never_migrated" has no outbox table; run tidings.Migrate`)
		_, err = ob.StageBatch(t.Context(), b.native.Execer(), []relay.Message{msg})
		require.ErrorIs(t, err, relay.ErrNotMigrated)
	})

	// An id the context carries (one taken from a request's header, say)
	// that PostgreSQL cannot store or index is refused before the insert,
	// naming it, and the caller's transaction goes on.
	t.Run("InvalidContextIDsNameItAndLeaveTheTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ok := relay.Message{Module: module, Kind: "k", Payload: payload(1)}
		tx, err := b.db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		for name, tc := range map[string]struct {
			ctx  context.Context
			want string
		}{
			"NUL":         {relay.WithCorrelationID(t.Context(), "a\x00b"), "the context's correlation id"},
			"InvalidUTF8": {relay.WithCorrelationID(t.Context(), "\xff\xfe"), "the context's correlation id"},
			"TooLong":     {relay.WithCorrelationID(t.Context(), strings.Repeat("c", relay.CorrelationMaxLen+1)), "the context's correlation id is 201 bytes"},
			"Causation":   {relay.WithCausationID(t.Context(), "x\ny"), "the context's causation id"},
		} {
			_, err := b.ob.Stage(tc.ctx, tx, ok)
			require.ErrorIs(t, err, relay.ErrInvalidMessage, name)
			require.ErrorContains(t, err, tc.want, name)
			_, err = b.ob.StageBatch(tc.ctx, tx, []relay.Message{ok})
			require.ErrorContains(t, err, tc.want, name)
		}
		_, err = b.ob.Stage(relay.WithCorrelationID(t.Context(), strings.Repeat("c", relay.CorrelationMaxLen)), tx, ok)
		require.NoError(t, err, "the transaction goes on, and the longest id is taken")
		require.NoError(t, tx.Commit())
		require.Equal(t, 1, b.count(t, "true"))
	})

	t.Run("InvalidMessagesNameTheFieldAndStageNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ok := relay.Message{Module: module, Kind: "k", Payload: payload(1)}
		for name, tc := range map[string]struct {
			mutate func(*relay.Message)
			want   string
		}{
			"EmptyModule":  {func(m *relay.Message) { m.Module = "" }, "Module is empty"},
			"BadModule":    {func(m *relay.Message) { m.Module = `x"; drop table y;--` }, "Module"},
			"EmptyKind":    {func(m *relay.Message) { m.Kind = "" }, "Kind is empty"},
			"LongKind":     {func(m *relay.Message) { m.Kind = strings.Repeat("k", 201) }, "Kind is 201 bytes"},
			"ControlKind":  {func(m *relay.Message) { m.Kind = "a\nb" }, "Kind"},
			"EmptyPayload": {func(m *relay.Message) { m.Payload = nil }, "Payload is empty"},
			"InvalidJSON":  {func(m *relay.Message) { m.Payload = json.RawMessage(`{"a":`) }, "Payload is not valid JSON"},
			"NULEscape":    {func(m *relay.Message) { m.Payload = json.RawMessage(`{"a":"x\u0000"}`) }, `\u0000`},
			"YearMinusOne": {func(m *relay.Message) { m.NotBefore = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }, "NotBefore is before 1970"},
			"FarAhead":     {func(m *relay.Message) { m.NotBefore = time.Now().Add(relay.NotBeforeMax + time.Hour) }, "NotBefore is more than"},
			"IDNotRFC9562": {func(m *relay.Message) { m.ID = uuid.Max }, "ID is not an RFC 9562 UUID"},
		} {
			msg := ok
			tc.mutate(&msg)
			_, err := b.ob.Stage(t.Context(), b.db, msg)
			require.ErrorIs(t, err, relay.ErrInvalidMessage, name)
			require.ErrorContains(t, err, tc.want, name)

			_, err = b.ob.StageBatch(t.Context(), b.db, []relay.Message{ok, msg})
			require.ErrorContains(t, err, "messages[1]: ", name)
			require.ErrorContains(t, err, tc.want, name)
		}
		require.Equal(t, 0, b.count(t, "true"))

		for _, tx := range []dbtx.Execer{nil, (*sql.Tx)(nil)} {
			_, err := b.ob.Stage(t.Context(), tx, ok)
			require.ErrorIs(t, err, relay.ErrInvalidMessage)
			require.ErrorContains(t, err, "tx is")
			_, err = b.ob.StageBatch(t.Context(), tx, []relay.Message{ok})
			require.ErrorIs(t, err, relay.ErrInvalidMessage)
			require.ErrorContains(t, err, "tx is")
		}

		// Two messages of one batch with one id: the second would be
		// dropped without a word.
		twin := ok
		twin.ID = uuid.NewSHA1(uuid.NameSpaceURL, []byte("twin"))
		_, err := b.ob.StageBatch(t.Context(), b.db, []relay.Message{twin, ok, twin})
		require.ErrorIs(t, err, relay.ErrInvalidMessage)
		require.ErrorContains(t, err, "messages[2]: relay: invalid message: ID is the ID of messages[0]")
		require.Equal(t, 0, b.count(t, "true"))

		// An escaped backslash followed by "u0000" is text, not a NUL.
		_, err = b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "k", Payload: json.RawMessage(`{"path":"C:\\u0000"}`)})
		require.NoError(t, err)
	})
	// Staging takes a payload exactly when PostgreSQL's jsonb does, and
	// names the Payload, never quoting the server, when it does not.
	t.Run("PayloadsAsJSONBTakesThem", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []string{
			`{"a":"x"}`,
			`{"a":"\u0000"}`,
			`{"a":"\\u0000"}`,
			`{"a":"\\\u0000"}`,
			`{"\u0000":1}`,
			`{"a":"\ud83d\ude00"}`,
			`{"a":"\uD83D\uDE00"}`,
			`{"a":"\ud800"}`,
			`{"a":"\udc00"}`,
			`{"a":"\udc00\ud800"}`,
			`{"a":"\ud800\u0041"}`,
			`{"a":"\ud800\\ude00"}`,
			`{"a":"\\\ud800"}`,
			`{"a":"\\ud800"}`,
			"{\"a\":\"\xff\"}",
			"{\"a\":\"caf\xc3\xa9\"}",
		} {
			var ignored string
			pgErr := b.db.QueryRowContext(t.Context(), `SELECT $1::jsonb::text`, p).Scan(&ignored)
			_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "k", Payload: json.RawMessage(p)})
			if pgErr == nil {
				require.NoError(t, err, "%q", p)
				continue
			}
			require.ErrorIs(t, err, relay.ErrInvalidMessage, "%q: PostgreSQL says %v", p, pgErr)
			require.ErrorContains(t, err, "Payload holds", "%q", p)
		}
	})
}

func TestNewOutboxRejectsBadSchemas(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{`a"; drop table x;--`, "Tidings", strings.Repeat("s", 64), "a.b"} {
		_, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
		require.ErrorContains(t, err, "schema", schema)
	}
	_, err := relay.NewOutbox(nil)
	require.NoError(t, err, "empty means the default")
}

// A message with an id of its own stages once however often it is
// staged, alone or in a batch, and keeps what the first staging wrote.
func TestStageWithAnIDOfItsOwnStagesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := uuid.NewSHA1(uuid.NameSpaceURL, []byte("resend/msg_2bH7kNwP5mQaV1sXgIdKe6pZr"))
	first := relay.Message{ID: id, Module: module, Kind: "report", Payload: payload(1), Secret: []byte("s1")}
	got, err := b.ob.Stage(t.Context(), b.db, first)
	require.NoError(t, err)
	require.Equal(t, id, got)

	again := first
	again.Payload, again.Secret = payload(2), []byte("s2")
	got, err = b.ob.Stage(t.Context(), b.db, again)
	require.NoError(t, err)
	require.Equal(t, id, got)
	other := relay.Message{Module: module, Kind: "report", Payload: payload(3)}
	ids, err := b.ob.StageBatch(t.Context(), b.db, []relay.Message{again, other})
	require.NoError(t, err)
	require.Equal(t, id, ids[0])
	require.NotEqual(t, id, ids[1])

	require.Equal(t, 2, b.count(t, "true"), "the id once, and the other message")
	require.Equal(t, 1, b.count(t, "id = '"+id.String()+"' AND payload = '{\"n\":1}'"), "the first staging stands")
	var secret []byte
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT secret FROM "`+b.schema+`".outbox WHERE id = $1`, id).Scan(&secret))
	require.Equal(t, "s1", string(secret), "and its secret")
}

func TestStageWithoutWakeUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := pq.NewListener(pgtest.URL(t), 10*time.Millisecond, time.Second, nil)
	t.Cleanup(func() { _ = l.Close() })
	require.NoError(t, l.Listen(b.schema+".outbox"))

	// Staged first without the wake-up, then with it: notifications
	// arrive in commit order, so the first one tells.
	quiet := b.ob.WithoutWakeUp()
	_, err := quiet.Stage(t.Context(), b.db, relay.Message{Module: "quiet", Kind: "k", Payload: payload(1)})
	require.NoError(t, err)
	_, err = quiet.StageBatch(t.Context(), b.db, []relay.Message{{Module: "quiet", Kind: "k", Payload: payload(2)}})
	require.NoError(t, err)
	_, err = b.ob.Stage(t.Context(), b.db, relay.Message{Module: "loud", Kind: "k", Payload: payload(3)})
	require.NoError(t, err)
	select {
	case n := <-l.Notify:
		require.Equal(t, "loud", n.Extra)
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up for the loud record")
	}
	require.Equal(t, 3, b.count(t, "true"), "all staged")

	// The sweep still finds the quiet ones.
	cfg := b.config(t)
	cfg.Module = "quiet"
	cfg.SweepInterval = 200 * time.Millisecond
	sink := newRecorder(nil)
	supervise(t, b.db, cfg, sink)
	sink.waitHands(t, 2, 5*time.Second)
}

// The longest schema name allowed still fits its NOTIFY channel: records
// stage and are handed.
func TestLongestSchemaStagesAndWakes(t *testing.T) {
	t.Parallel()
	prefix := fmt.Sprintf("t_long_%d_", os.Getpid())
	schema := prefix + strings.Repeat("x", ident.SchemaMaxLen-len(prefix))
	admin := pgtest.AdminDB(t)
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`) })
	require.NoError(t, tidings.Migrate(t.Context(), admin, schema))
	pgtest.Grant(t, admin, schema)
	db := pgtest.DB(t)
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: schema})
	require.NoError(t, err)
	b := testBundle{db: db, native: &drivertest.DB{DB: db}, schema: schema, ob: ob}
	sink := newRecorder(nil)
	supervise(t, db, b.config(t), sink) // sweep every hour: the wake-up must work
	b.eventually(t, "true", 0, time.Second)
	b.stage(t, 1)
	sink.waitHands(t, 1, 10*time.Second)

	_, err = relay.NewOutbox(&relay.OutboxConfig{Schema: schema + "x"})
	require.ErrorContains(t, err, "at most 56 allowed")
}
