package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Message is what a caller stages: a record of any kind for one module's
// relay.
type Message struct {
	// ID is the record's id. The zero value means a new UUIDv7, which is
	// what most callers want. A caller that derives the id from what it
	// stages, such as a UUIDv5 of a provider's event id, makes staging
	// idempotent: a message whose id is already in the outbox stages
	// nothing, so an event delivered twice is staged once.
	// It must be an RFC 9562 UUID (variant bits 10); two messages of one
	// StageBatch may not share it.
	ID uuid.UUID
	// Module names the relay that hands the record: a lower-case identifier
	// (letters, digits, underscores; at most 63 bytes). Required.
	Module string
	// Kind tells the sink what the payload is, such as
	// "notification.requested". Required; at most 200 bytes, printable.
	Kind string
	// Lane groups records that share a limit on how many may be in flight
	// at once (Config.LaneLimit, and its share of Config.Connections),
	// such as a provider's: notifications use
	// their channel. At most 200 bytes, printable; empty is a lane too.
	Lane string
	// Payload is the record's body. Required; must be valid JSON.
	Payload json.RawMessage
	// NotBefore, when set, is the time before which the record is not
	// handed. The zero value, or a time in the past, means as soon as it
	// commits, but one more than ten seconds past may wait for the
	// relay's next sweep (Config.SweepInterval); a time before 1970 or more than
	// NotBeforeMax (a year) ahead is invalid. It is compared with the database's clock, as every due
	// time is: a time computed from the application's clock, such as
	// time.Now().Add(d), is off by any skew between the two clocks.
	NotBefore time.Time
	// Secret holds what the record's sink may use but nothing may keep,
	// such as a verification code: stored apart from the payload (which
	// operators list and re-emit), never logged, handed to the sink as
	// Record.Secret, and erased in the transaction that ends the record
	// (processed, dead or cancelled). Nil means none; at most SecretMaxLen
	// bytes. A dead record re-emitted has no secret any more.
	Secret []byte
}

// SecretMaxLen is the longest Message.Secret accepted, in bytes.
const SecretMaxLen = 64 << 10

// Record is one claimed record, as a sink sees it.
type Record struct {
	ID            uuid.UUID         // stable for the record's whole life
	Module        string            // the relay's module
	Lane          string            // as staged
	Kind          string            // as staged
	Payload       json.RawMessage   // as staged
	Headers       map[string]string // W3C trace context and baggage of the staging write
	CorrelationID string            // the staging write's correlation id
	CausationID   string            // the record that caused this one; may be empty
	CreatedAt     time.Time         // staging time (database clock)
	Attempts      int               // answers other than done so far; this hand is attempt Attempts+1
	Hand          int               // 1 on the first hand; counts crashes and lease expiries too
	Unsure        int               // Unsure answers so far (see Config.MaxUnsure)
	LastError     string            // the reason of the last Retry or Unsure; empty until one, and after a re-emit
	Secret        []byte            // Message.Secret, while the record lives; nil if none

	staged    time.Duration // staging to claim, on the database clock
	claimedAt time.Time     // when the claim returned, on this process's clock
	claim     int64         // the row's claims with this one: the settle's fence
}

// Waited reports how long the record has waited since it was staged: the
// time until its claim on the database clock, plus the time since the claim
// on this process's monotonic clock, so clock skew between the two does
// not distort it. It is zero for a Record the relay did not claim.
func (r Record) Waited() time.Duration {
	if r.claimedAt.IsZero() {
		return 0
	}
	return r.staged + time.Since(r.claimedAt)
}

// Context returns parent carrying what the staging write's context
// carried: its trace context and baggage (W3C), its correlation id, and the
// record's id as the causation id of anything staged with it. The relay
// hands a Sink its records in such a context; a BatchSink builds one per
// record with it.
func (r Record) Context(parent context.Context) context.Context {
	ctx := propagator.Extract(parent, propagation.MapCarrier(r.Headers))
	ctx = WithCorrelationID(ctx, r.CorrelationID)
	return WithCausationID(ctx, r.ID.String())
}

// StartSpan starts the consumer span of handling r, named name, in the
// trace ctx carries (Record.Context restores the staging write's) and
// linked to the staging write's span, with r's messaging attributes and
// extra. It is the span the relay starts for each hand of a record Sink;
// a BatchSink starts its own for each record it handles.
//
// The sampler sees the attributes the messaging conventions name for
// sampling (messaging.system, messaging.operation.type and
// messaging.destination.name); the record's id, correlation id, hand and
// extra are set only on a span that records: built for a span the sampler
// drops, they cost more than twice what starting it does
// (BenchmarkStartSpan).
func (r Record) StartSpan(ctx context.Context, tracer trace.Tracer, name string, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("messaging.system", "tidings"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", r.Module),
	)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := tracer.Start(ctx, name, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.message.id", r.ID.String()),
			attribute.String("messaging.message.conversation_id", r.CorrelationID),
			attribute.Int("tidings.hand", r.Hand),
		)
		span.SetAttributes(extra...)
	}
	return ctx, span
}

// Sink handles the records a relay claims. Handle is called concurrently for
// different records, and may be called again for a record it already saw (a
// crash, an expired lease): make its effect idempotent. ctx carries the
// staging write's trace, baggage and correlation id, and ends at the hand
// timeout or when the supervisor gives up draining. Handle must return soon
// after ctx ends: a hand that ignores it keeps its slot of Concurrency, and
// Supervise waits for it before it returns.
type Sink interface {
	Handle(ctx context.Context, rec Record) Result
}

// SinkFunc adapts a plain function to Sink.
type SinkFunc func(ctx context.Context, rec Record) Result

// Handle calls f(ctx, rec).
func (f SinkFunc) Handle(ctx context.Context, rec Record) Result { return f(ctx, rec) }

// Preparer is a Sink whose settings must agree with the relay that hands it
// records: Supervise calls Prepare once, with the relay's pool and its
// Config (defaults applied), before it reads or claims anything, and
// returns Prepare's error without starting. An error names the sink's
// setting and the relay's setting that disagree.
type Preparer interface {
	Prepare(ctx context.Context, db *sql.DB, cfg Config) error
}

// ErrHandTimeout is the cause (context.Cause) of a hand's context that
// ended because Config.HandTimeout passed.
var ErrHandTimeout = errors.New("relay: hand timeout")

// Purger is a Sink that also keeps state of its own (such as inbox claims)
// to purge after a retention of its own. The supervisor calls Purge on every
// purge pass, next to purging its own settled records.
type Purger interface {
	Purge(ctx context.Context) (int64, error)
}

type outcome uint8

const (
	outcomeInvalid outcome = iota
	outcomeDone
	outcomeRetry
	outcomeDead
	outcomeRelease // given back unstarted: at shutdown, or Later
	outcomeUnsure  // the effect may or may not have happened
)

func (o outcome) String() string {
	return [...]string{"invalid", "done", "retry", "dead", "release", "unsure"}[o]
}

// Result is a sink's answer for one record. Build it with Done, DoneWith,
// Retry, Unsure, Later or Dead. The zero Result is no answer: the relay records it as a
// retry whose reason says so.
type Result struct {
	outcome outcome
	delay   time.Duration
	text    string         // the result of done, the reason otherwise
	code    string         // a stable machine code of text
	detail  map[string]any // for the timeline entry; see WithDetail
}

// WithCode returns r with a stable machine code beside its reason (or, for
// Done, its result), such as "provider.rejected": a lower-case word with
// dots and underscores, short, and the same for every record of the same
// cause, so that records can be grouped by it. It is kept on the row and
// in the record's timeline, cut at CodeMaxLen bytes: the row's index
// takes no longer.
func (r Result) WithCode(code string) Result {
	r.code = code
	return r
}

// Code returns r's machine code, or "".
func (r Result) Code() string { return r.code }

// WithDetail returns r with detail for the record's timeline entry: what
// the decision read, such as the rule and the row that stopped a
// delivery. It must encode as JSON and hold no personal data or secret;
// one that does not encode, or that PostgreSQL's jsonb cannot store (a
// json.RawMessage can hold anything), is replaced by a note saying so,
// and the record settles as answered. A Done with a detail gets a
// timeline entry of its own; a plain Done is read from the row.
func (r Result) WithDetail(detail map[string]any) Result {
	r.detail = detail
	return r
}

// Detail returns r's detail for the timeline entry, or nil; it is r's
// own, not a copy.
func (r Result) Detail() map[string]any { return r.detail }

// Done settles the record as processed.
func Done() Result { return Result{outcome: outcomeDone} }

// DoneWith settles the record as processed and keeps result, such as a
// provider's reference for a message, with it, cut at ResultMaxLen bytes:
// the row's index takes no longer.
func DoneWith(result string) Result { return Result{outcome: outcomeDone, text: result} }

// The longest result (DoneWith) and code (WithCode) a record keeps, in
// bytes; longer ones are cut there, at a character's boundary. A row's
// index entry holds at most some 2,700 bytes, and a settle that exceeds
// it would fail for every record settled with it.
const (
	ResultMaxLen = 1000
	CodeMaxLen   = 200
)

// Retry leaves the record pending until delay has passed (on the database
// clock), counts the attempt and keeps reason as its last error. A negative
// delay is zero.
func Retry(delay time.Duration, reason error) Result {
	return Result{outcome: outcomeRetry, delay: max(delay, 0), text: reasonText(reason)}
}

// Unsure leaves the record pending until delay has passed, keeping reason
// as its last error, without counting an attempt or the hand: the sink
// cannot tell whether its effect happened, as when the commit of a
// delivered request lost its answer. Such a record is handed again (the
// sink's idempotency decides) and never exhausts a retry budget or
// MaxHands for it; Config.MaxUnsure bounds a record that is unsure every
// time.
func Unsure(delay time.Duration, reason error) Result {
	return Result{outcome: outcomeUnsure, delay: max(delay, 0), text: reasonText(reason)}
}

// Later gives the record back unstarted, to be handed again once delay has
// passed: the sink did not begin on it, as when a limit of its own was
// reached. Neither an attempt nor the hand is counted, so a record that
// waits this way never exhausts its retries or MaxHands.
func Later(delay time.Duration) Result { return Result{outcome: outcomeRelease, delay: max(delay, 0)} }

// Dead settles the record as dead with reason, to be listed and re-emitted
// by an operator.
func Dead(reason error) Result { return Result{outcome: outcomeDead, text: reasonText(reason)} }

// ErrNoReason stands in for a nil reason given to Retry or Dead.
var ErrNoReason = errors.New("relay: no reason given")

func reasonText(err error) string {
	if err == nil {
		err = ErrNoReason
	}
	return err.Error()
}

// String describes the result, such as "done", "done: <result>",
// "retry in 15s: provider down" or "dead: <reason>".
func (r Result) String() string {
	switch r.outcome {
	case outcomeDone:
		if r.text != "" {
			return "done: " + r.text
		}
		return "done"
	case outcomeRetry:
		return fmt.Sprintf("retry in %s: %s", r.delay, r.text)
	case outcomeUnsure:
		return fmt.Sprintf("unsure, again in %s: %s", r.delay, r.text)
	case outcomeDead:
		return "dead: " + r.text
	case outcomeRelease:
		return fmt.Sprintf("later, in %s", r.delay)
	}
	return r.outcome.String()
}
