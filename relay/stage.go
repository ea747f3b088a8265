package relay

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/validate"
)

// KindMaxLen is the longest Message.Kind (and Message.Lane) accepted, in
// bytes.
const KindMaxLen = 200

// NotBeforeMax is how far ahead of now (the application's clock) a
// Message.NotBefore may be: an outbox is no calendar.
const NotBeforeMax = validate.NotBeforeMax

// ErrInvalidMessage marks a Message that cannot be staged; the error names
// the field.
var ErrInvalidMessage = errors.New("relay: invalid message")

// propagator captures the staging write's trace context and baggage (W3C).
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Stage stages msg in the default schema's outbox; see [Outbox.Stage].
func Stage(ctx context.Context, tx dbtx.Execer, msg Message) (uuid.UUID, error) {
	return defaultOutbox.Stage(ctx, tx, msg)
}

// StageBatch stages msgs in the default schema's outbox; see
// [Outbox.StageBatch].
func StageBatch(ctx context.Context, tx dbtx.Execer, msgs []Message) ([]uuid.UUID, error) {
	return defaultOutbox.StageBatch(ctx, tx, msgs)
}

// Stage writes msg as one outbox row inside tx and returns its id:
// Message.ID, or a new UUIDv7 when that is zero. A message whose ID is
// already in the outbox writes nothing. The row exists if and only if tx
// commits, and its module's relay is woken at that commit; a row of a
// transaction that was open for more than ten seconds when it committed
// may wait for the relay's next sweep instead (Config.SweepInterval). The
// row carries the trace context and baggage of ctx, and its correlation
// and causation ids (see WithCorrelationID).
// An invalid msg is an ErrInvalidMessage naming the field; nothing is
// written then.
func (o *Outbox) Stage(ctx context.Context, tx dbtx.Execer, msg Message) (uuid.UUID, error) {
	if err := validate.NotNil("tx", tx); err != nil {
		return uuid.Nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	if err := errors.Join(checkContextIDs(ctx), msg.validate()); err != nil {
		return uuid.Nil, err
	}
	row, err := o.prepare(ctx, msg)
	if err != nil {
		return uuid.Nil, err
	}
	var notBefore any
	if !msg.NotBefore.IsZero() {
		notBefore = msg.NotBefore
	}
	// The id as text: pgx encodes a uuid.UUID through its driver.Valuer
	// only after a plan that fails, building an error each time.
	if _, err := tx.ExecContext(ctx, o.q.stage, row.id.String(), msg.Module, msg.Kind, []byte(msg.Payload),
		row.headers, row.correlation, row.causation, notBefore, o.wakeChannel(), msg.Lane, msg.Secret); err != nil {
		return uuid.Nil, o.tableError("stage", err)
	}
	return row.id, nil
}

// StageBatch writes msgs in one statement inside tx and returns their ids
// in order; otherwise it is Stage. If any message is invalid, the error
// names its index and field and nothing is written.
func (o *Outbox) StageBatch(ctx context.Context, tx dbtx.Execer, msgs []Message) ([]uuid.UUID, error) {
	if err := validate.NotNil("tx", tx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	n := len(msgs)
	if n == 0 {
		return nil, nil
	}
	if err := checkContextIDs(ctx); err != nil {
		return nil, err
	}
	given := map[uuid.UUID]int{}
	for i, msg := range msgs {
		if err := msg.validate(); err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		if msg.ID == uuid.Nil {
			continue
		}
		if j, ok := given[msg.ID]; ok {
			return nil, fmt.Errorf("messages[%d]: %w: ID is the ID of messages[%d]", i, ErrInvalidMessage, j)
		}
		given[msg.ID] = i
	}
	ids := make([]uuid.UUID, n)
	cols := [8][]string{}
	for c := range cols {
		cols[c] = make([]string, n)
	}
	notBefore := make([]sql.NullString, n)
	secrets := make([]sql.NullString, n) // hex: a bytea array cannot hold a NULL
	for i, msg := range msgs {
		row, err := o.prepare(ctx, msg)
		if err != nil {
			return nil, err
		}
		ids[i] = row.id
		cols[0][i], cols[1][i], cols[2][i], cols[3][i] = row.id.String(), msg.Module, msg.Kind, string(msg.Payload)
		cols[4][i], cols[5][i], cols[6][i], cols[7][i] = string(row.headers), row.correlation, row.causation, msg.Lane
		if !msg.NotBefore.IsZero() {
			notBefore[i] = sql.NullString{String: msg.NotBefore.Format(time.RFC3339Nano), Valid: true}
		}
		if msg.Secret != nil {
			secrets[i] = sql.NullString{String: hex.EncodeToString(msg.Secret), Valid: true}
		}
	}
	if _, err := tx.ExecContext(ctx, o.q.stageBatch, pgarray.Of(cols[0]), pgarray.Of(cols[1]), pgarray.Of(cols[2]),
		pgarray.Of(cols[3]), pgarray.Of(cols[4]), pgarray.Of(cols[5]), pgarray.Of(cols[6]), pgarray.Of(notBefore),
		o.wakeChannel(), pgarray.Of(cols[7]), pgarray.Of(secrets)); err != nil {
		return nil, o.tableError("stage batch", err)
	}
	return ids, nil
}

type stagedRow struct {
	id                     uuid.UUID
	headers                []byte
	correlation, causation string
}

// prepare gives msg its id (its own, or a new UUIDv7) and captures what ctx carries: a producer span,
// the trace context and baggage, the correlation and causation ids.
func (o *Outbox) prepare(ctx context.Context, msg Message) (stagedRow, error) {
	id := msg.ID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return stagedRow{}, fmt.Errorf("relay: new id: %w", err)
		}
	}
	ctx, span := o.tracer.Start(ctx, "send "+msg.Module,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "tidings"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", msg.Module),
			attribute.String("messaging.message.id", id.String()),
		))
	defer span.End()
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	headers, err := json.Marshal(carrier)
	if err != nil {
		return stagedRow{}, fmt.Errorf("relay: encode headers: %w", err)
	}
	row := stagedRow{id: id, headers: headers, correlation: CorrelationID(ctx), causation: CausationID(ctx)}
	if row.correlation == "" {
		row.correlation = id.String()
	}
	return row, nil
}

// checkContextIDs checks the correlation and causation ids ctx carries:
// an id that PostgreSQL cannot store, or whose index entry it cannot
// take, would fail the insert and abort the caller's transaction.
func checkContextIDs(ctx context.Context) error {
	for _, err := range []error{
		validate.Printable("the context's correlation id", CorrelationID(ctx), CorrelationMaxLen),
		validate.Printable("the context's causation id", CausationID(ctx), CorrelationMaxLen),
	} {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
	}
	return nil
}

func (m Message) validate() error {
	if err := ident.Check("Module", m.Module); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	switch {
	case m.Kind == "":
		return fmt.Errorf("%w: Kind is empty", ErrInvalidMessage)
	case len(m.Payload) == 0:
		return fmt.Errorf("%w: Payload is empty", ErrInvalidMessage)
	case !json.Valid(m.Payload):
		return fmt.Errorf("%w: Payload is not valid JSON", ErrInvalidMessage)
	case !validate.JSONStorable(m.Payload):
		return fmt.Errorf(`%w: Payload holds the escape \u0000, a lone UTF-16 surrogate escape or invalid UTF-8, which PostgreSQL's jsonb cannot store`, ErrInvalidMessage)
	case m.ID != uuid.Nil && m.ID.Variant() != uuid.RFC4122:
		return fmt.Errorf("%w: ID is not an RFC 9562 UUID (its variant is %s)", ErrInvalidMessage, m.ID.Variant())
	case len(m.Secret) > SecretMaxLen:
		return fmt.Errorf("%w: Secret is %d bytes long, at most %d allowed", ErrInvalidMessage, len(m.Secret), SecretMaxLen)
	}
	for _, err := range []error{
		validate.Printable("Kind", m.Kind, KindMaxLen),
		validate.Printable("Lane", m.Lane, KindMaxLen),
		validate.NotBefore("NotBefore", m.NotBefore, time.Now()),
	} {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
	}
	return nil
}
