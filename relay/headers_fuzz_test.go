package relay

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/validate"
)

// The headers column carries the staging write's W3C trace context and
// baggage. Staging writes it, but anything that can write the table can put
// anything JSON in it (a producer in another language, a hand-written
// INSERT, a bug). These tests feed such headers through what the relay does
// with a claimed row's headers: decode them into Record.Headers as claim
// does, then hand the record (extract the trace context and baggage, start
// the consumer span, call the sink, settle).

// A valid W3C traceparent and its parts, for seeds.
const (
	hdrTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	hdrSpanID      = "00f067aa0ba902b7"
	hdrTraceparent = "00-" + hdrTraceID + "-" + hdrSpanID + "-01"
)

// hdrSeeds are the seeds of FuzzHeaders and the rows of
// TestBadHeadersAreStillHanded, each with why it is interesting.
var hdrSeeds = []struct {
	why     string
	headers string
}{
	{"what staging writes", `{"traceparent":"` + hdrTraceparent + `","tracestate":"congo=t61rcWkgMzE","baggage":"tenant=acme"}`},
	{"staging without a span in ctx", `{}`},
	{"JSON null", `null`},
	{"an array", `[]`},
	{"a string", `"traceparent"`},
	{"a number", `1`},
	{"a boolean", `true`},
	{"traceparent of the wrong type", `{"traceparent":7}`},
	{"a good traceparent next to a value of the wrong type (decoding stops half way)", `{"traceparent":"` + hdrTraceparent + `","x":1}`},
	{"a value of the wrong type before a good traceparent", `{"x":{"nested":[1,2]},"traceparent":"` + hdrTraceparent + `"}`},
	{"upper-case hex, which W3C forbids", `{"traceparent":"00-` + strings.ToUpper(hdrTraceID) + `-` + hdrSpanID + `-01"}`},
	{"an all-zero trace id", `{"traceparent":"00-00000000000000000000000000000000-` + hdrSpanID + `-01"}`},
	{"an all-zero span id", `{"traceparent":"00-` + hdrTraceID + `-0000000000000000-01"}`},
	{"version ff, which W3C forbids", `{"traceparent":"ff-` + hdrTraceID + `-` + hdrSpanID + `-01"}`},
	{"a future version with an extra field", `{"traceparent":"cc-` + hdrTraceID + `-` + hdrSpanID + `-01-future"}`},
	{"version 00 with an extra field", `{"traceparent":"` + hdrTraceparent + `-extra"}`},
	{"reserved flag bits", `{"traceparent":"00-` + hdrTraceID + `-` + hdrSpanID + `-ff"}`},
	{"truncated", `{"traceparent":"00-` + hdrTraceID[:10] + `"}`},
	{"the key in another case", `{"Traceparent":"` + hdrTraceparent + `"}`},
	{"a duplicate key", `{"traceparent":"garbage","traceparent":"` + hdrTraceparent + `"}`},
	{"a malformed tracestate", `{"traceparent":"` + hdrTraceparent + `","tracestate":"a=1,,,=b,` + strings.Repeat("k=v,", 40) + `"}`},
	{"a malformed baggage", `{"baggage":"%%%,=;;;,tenant=%zz,=x;y"}`},
	{"an oversized baggage", `{"baggage":"` + strings.Repeat("k=v,", 2000) + `k=v"}`},
	{"a huge value", `{"traceparent":"` + strings.Repeat("0", 10_000) + `"}`},
	{"unicode and escapes", `{"traceparent":"00-\u00e9\u00e9-\ud83d\ude00","baggage":"k=\u2028v"}`},
	{"deep nesting", `{"a":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200) + `}`},
	// Not storable as jsonb, but a decoder must survive it.
	{"not JSON", `{"traceparent":`},
	{"invalid UTF-8", "{\"traceparent\":\"\xff\xfe\"}"},
	{"a NUL escape", `{"traceparent":"\u0000"}`},
	{"a raw NUL", "{\"traceparent\":\"a\x00b\"}"},
	{"empty input", ``},
}

// hdrDecode decodes a row's headers column as claim (supervisor.go)
// does: an error is logged and ignored, and whatever was decoded before it
// is kept.
func hdrDecode(raw []byte) map[string]string {
	var h map[string]string
	_ = json.Unmarshal(raw, &h)
	return h
}

// hdrStrictTraceparent is an independent reading of W3C Trace Context level 1
// for version 00: it reports the trace and span id of a traceparent every
// conforming implementation must accept.
var hdrStrictTraceparent = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-0[0-3]$`)

func hdrWantParent(headers map[string]string) (trace.TraceID, trace.SpanID, bool) {
	m := hdrStrictTraceparent.FindStringSubmatch(headers["traceparent"])
	if m == nil {
		return trace.TraceID{}, trace.SpanID{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	_, _ = hex.Decode(tid[:], []byte(m[1]))
	_, _ = hex.Decode(sid[:], []byte(m[2]))
	if !tid.IsValid() || !sid.IsValid() {
		return tid, sid, false
	}
	return tid, sid, true
}

// hdrHanded is what the sink saw of one hand.
type hdrHanded struct {
	id          uuid.UUID
	correlation string
	causation   string
	span        trace.SpanContext
}

// FuzzHeaders hands a record whose headers column holds arbitrary bytes.
// Whatever the bytes: nothing panics, the sink is called exactly once
// inside a consumer span that carries the record's correlation and
// causation ids, and the record settles as the sink answered. A
// traceparent that W3C says is valid continues its trace, linked; a record
// without one starts a trace of its own.
func FuzzHeaders(f *testing.F) {
	for _, seed := range hdrSeeds {
		f.Add([]byte(seed.headers))
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))

	f.Fuzz(func(t *testing.T, raw []byte) {
		spans.Reset()
		var (
			mu  sync.Mutex
			got []hdrHanded
		)
		sink := SinkFunc(func(ctx context.Context, rec Record) Result {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, hdrHanded{id: rec.ID, correlation: CorrelationID(ctx), causation: CausationID(ctx),
				span: trace.SpanContextFromContext(ctx)})
			return DoneWith("ok")
		})
		s, err := newSupervisor(nil, Config{Module: "orders", TracerProvider: tp}.withDefaults(), sink)
		require.NoError(t, err)

		rec := Record{
			ID: uuid.Must(uuid.NewV7()), Module: "orders", Kind: "order.placed", Payload: json.RawMessage(`{}`),
			Headers: hdrDecode(raw), CorrelationID: "corr-1", Hand: 1,
		}
		s.hand(context.Background(), rec)

		var st settlement
		select {
		case st = <-s.settles:
		default:
			t.Fatal("the hand queued no settlement")
		}
		require.Equal(t, rec.ID, st.id)
		require.Equal(t, rec.Hand, st.hand)
		require.Equal(t, outcomeDone, st.res.outcome, "the sink's answer is what settles")

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 1, "handed exactly once")
		require.Equal(t, rec.ID, got[0].id)
		require.Equal(t, "corr-1", got[0].correlation)
		require.Equal(t, rec.ID.String(), got[0].causation)
		require.True(t, got[0].span.IsValid(), "the sink runs inside a span")

		ended := spans.GetSpans()
		require.Len(t, ended, 1, "one consumer span, ended")
		span := ended[0]
		require.Equal(t, trace.SpanKindConsumer, span.SpanKind)
		require.Equal(t, got[0].span, span.SpanContext)

		if tid, sid, ok := hdrWantParent(rec.Headers); ok {
			require.Equal(t, tid, span.SpanContext.TraceID(), "a valid traceparent continues its trace")
			require.Equal(t, sid, span.Parent.SpanID())
			require.Len(t, span.Links, 1, "and is linked")
			require.Equal(t, tid, span.Links[0].SpanContext.TraceID())
			require.Equal(t, sid, span.Links[0].SpanContext.SpanID())
		}
		if rec.Headers["traceparent"] == "" {
			require.False(t, span.Parent.IsValid(), "no traceparent: a trace of its own")
			require.Empty(t, span.Links)
		}
	})
}

// TestBadHeadersAreStillHanded writes rows with the seeds' headers straight
// into the outbox, as a foreign producer could, and runs a real relay over
// them: every row is claimed, handed once and processed, whatever its
// headers hold.
func TestBadHeadersAreStillHanded(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	schema := pgtest.Schema(t, Migrate)
	const module = "headers"

	type row struct {
		why     string
		headers string
	}
	ids := map[uuid.UUID]row{}
	for _, seed := range hdrSeeds {
		// jsonb stores only valid UTF-8 JSON without a NUL or a lone
		// surrogate: the other seeds cannot reach a claim.
		if !json.Valid([]byte(seed.headers)) || !validate.JSONStorable([]byte(seed.headers)) {
			continue
		}
		id := uuid.Must(uuid.NewV7())
		_, err := db.ExecContext(t.Context(), `INSERT INTO "`+schema+`".outbox (id, module, kind, payload, headers)
			VALUES ($1, $2, 'order.placed', '{}', $3::jsonb)`, id, module, seed.headers)
		require.NoError(t, err, seed.why)
		ids[id] = row{why: seed.why, headers: seed.headers}
	}
	require.Greater(t, len(ids), 20)

	var (
		mu    sync.Mutex
		hands = map[uuid.UUID]int{}
		spans = map[uuid.UUID]trace.SpanContext{}
	)
	sink := SinkFunc(func(ctx context.Context, rec Record) Result {
		mu.Lock()
		defer mu.Unlock()
		hands[rec.ID]++
		spans[rec.ID] = trace.SpanContextFromContext(ctx)
		return Done()
	})
	tp := sdktrace.NewTracerProvider()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Supervise(ctx, db, &Config{Module: module, Schema: schema, TracerProvider: tp,
			HandTimeout: 5 * time.Second, Lease: 10 * time.Second, SweepInterval: time.Hour, GracePeriod: 5 * time.Second}, sink)
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	// The rows were due before the relay started: its first claim takes
	// them all, without a wake-up.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM "`+schema+`".outbox WHERE processed_at IS NOT NULL`).Scan(&n))
		return n == len(ids)
	}, 20*time.Second, 10*time.Millisecond, "every row is processed")

	mu.Lock()
	defer mu.Unlock()
	for id, r := range ids {
		require.Equal(t, 1, hands[id], "handed once: %s", r.why)
		require.True(t, spans[id].IsValid(), "handed inside a span: %s", r.why)
		// What PostgreSQL gives back is what the relay decodes: jsonb
		// keeps the last of duplicate keys, as encoding/json does.
		if tid, _, ok := hdrWantParent(hdrDecode([]byte(r.headers))); ok {
			require.Equal(t, tid, spans[id].TraceID(), "a valid traceparent continues its trace: %s", r.why)
		}
	}
	var hand int
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT max(hands) FROM "`+schema+`".outbox`).Scan(&hand))
	require.Equal(t, 1, hand)
}

// The propagator the relay uses reads exactly these keys; if it grows one,
// the seeds above need a case for it.
func TestHeaderFieldsAreTheSeeded(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, []string{"traceparent", "tracestate", "baggage"}, propagator.Fields())
}
