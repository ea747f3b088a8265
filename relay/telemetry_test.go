package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/relay"
)

func TestTelemetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	// Staging takes the provider its Outbox was given, not the global one.
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: b.schema, TracerProvider: tp})
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	type seen struct {
		trace   trace.SpanContext
		baggage string
	}
	got := make(chan seen, 1)
	sink := relay.SinkFunc(func(ctx context.Context, rec relay.Record) relay.Result {
		got <- seen{trace.SpanContextFromContext(ctx), baggage.FromContext(ctx).Member("tenant").Value()}
		return relay.Done()
	})
	cfg := b.config(t)
	cfg.TracerProvider, cfg.MeterProvider = tp, mp
	supervise(t, b.db, cfg, sink)

	member, err := baggage.NewMember("tenant", "acme")
	require.NotSame(t, tp, otel.GetTracerProvider())
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	ctx, request := tp.Tracer("app").Start(baggage.ContextWithBaggage(t.Context(), bag), "POST /orders")
	id, err := ob.Stage(ctx, b.db, relay.Message{Module: module, Kind: "order.placed", Payload: payload(1)})
	require.NoError(t, err)
	request.End()

	var hand seen
	select {
	case hand = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("not handed")
	}
	require.Equal(t, request.SpanContext().TraceID(), hand.trace.TraceID(), "the hand runs inside the staging write's trace")
	require.Equal(t, "acme", hand.baggage, "baggage rides along")

	var producer, consumer sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range spans.GetSpans().Snapshots() {
			for _, a := range s.Attributes() {
				if a.Key == "messaging.message.id" && a.Value.AsString() == id.String() {
					switch s.SpanKind() {
					case trace.SpanKindProducer:
						producer = s
					case trace.SpanKindConsumer:
						consumer = s
					}
				}
			}
		}
		return producer != nil && consumer != nil
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "send "+module, producer.Name())
	require.Equal(t, request.SpanContext().SpanID(), producer.Parent().SpanID())
	require.Equal(t, "process "+module, consumer.Name())
	require.Equal(t, producer.SpanContext().SpanID(), consumer.Parent().SpanID())
	require.Len(t, consumer.Links(), 1)
	require.Equal(t, producer.SpanContext().SpanID(), consumer.Links()[0].SpanContext.SpanID())
	require.Contains(t, consumer.Attributes(), attribute.Int("tidings.hand", 1))
	for _, a := range consumer.Attributes() {
		require.NotContains(t, a.Value.Emit(), `"n"`, "no payload in span attributes")
	}

	var rm metricdata.ResourceMetrics
	require.Eventually(t, func() bool {
		require.NoError(t, reader.Collect(t.Context(), &rm))
		return sumOf(rm, relay.MetricSettled, attribute.String("tidings.outcome", "done")) == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, sumOf(rm, relay.MetricHanded, attribute.String("tidings.module", module)))
	require.EqualValues(t, 1, sumOf(rm, relay.MetricSettled, attribute.String(relay.AttrLane, relay.LaneUnknown)),
		"a record without a lane is counted under LaneUnknown, not an empty name")
	for _, name := range []string{relay.MetricHandDuration, relay.MetricLag} {
		requireSecondsBuckets(t, rm, name)
	}
}

// sampled is a sampler that drops every span and keeps what it was asked
// about the relay's consumer spans.
type sampled struct{ asked chan []attribute.KeyValue }

func (s sampled) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Kind == trace.SpanKindConsumer {
		s.asked <- p.Attributes
	}
	return sdktrace.SamplingResult{Decision: sdktrace.Drop}
}

func (sampled) Description() string { return "drops every span" }

// A sampler decides on a hand's span with the attributes the messaging
// conventions name for sampling; the rest are built only for a span that
// records.
func TestSamplerSeesTheDestination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := sampled{asked: make(chan []attribute.KeyValue, 1)}
	cfg := b.config(t)
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(s))
	handed := make(chan struct{}, 1)
	supervise(t, b.db, cfg, relay.SinkFunc(func(context.Context, relay.Record) relay.Result {
		handed <- struct{}{}
		return relay.Done()
	}))
	_, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "order.placed", Payload: payload(1)})
	require.NoError(t, err)

	require.ElementsMatch(t, []attribute.KeyValue{
		attribute.String("messaging.system", "tidings"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", module),
	}, testwait.Recv(t, s.asked, "the sampler to be asked about the hand's span"))
	testwait.Recv(t, handed, "the record to be handed")
}

// requireSecondsBuckets fails unless the histogram name has data, in
// buckets from a millisecond to ten minutes.
func requireSecondsBuckets(t *testing.T, rm metricdata.ResourceMetrics, name string) {
	t.Helper()
	points := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				require.Equal(t, 0.001, dp.Bounds[0], name)
				require.Equal(t, 600.0, dp.Bounds[len(dp.Bounds)-1], name)
				points++
			}
		}
	}
	require.NotZero(t, points, "%s has no data", name)
}

func TestGauges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reader := sdkmetric.NewManualReader()
	cfg := b.config(t)
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.LaneLimit = 1 // one push record in flight; the others wait, due
	cfg.HandTimeout, cfg.Lease = time.Minute, 2*time.Minute

	handed, release := make(chan struct{}, 1), make(chan struct{})
	sink := relay.SinkFunc(func(ctx context.Context, rec relay.Record) relay.Result {
		if rec.Lane == "sms" {
			return relay.Dead(errors.New("invalid number")).WithCode("recipient.invalid")
		}
		select {
		case handed <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return relay.Later(time.Hour)
	})
	later := time.Now().Add(time.Hour)
	var msgs []relay.Message
	for lane, n := range map[string]int{"push": 3, "sms": 2} {
		for range n {
			msgs = append(msgs, relay.Message{Module: module, Kind: "x", Lane: lane, Payload: payload(0)})
		}
	}
	msgs = append(msgs,
		relay.Message{Module: module, Kind: "x", Lane: "mail", Payload: payload(0), NotBefore: later},
		relay.Message{Module: module, Kind: "x", Lane: "mail", Payload: payload(0), NotBefore: later},
		relay.Message{Module: module, Kind: "x", Payload: payload(0), NotBefore: later},
		relay.Message{Module: "other", Kind: "x", Lane: "push", Payload: payload(0)})
	_, err := b.ob.StageBatch(t.Context(), b.db, msgs)
	require.NoError(t, err)
	stop := supervise(t, b.db, cfg, sink)
	testwait.Recv(t, handed, "a push record handed")
	b.eventually(t, "failed_at IS NOT NULL", 2, 10*time.Second)

	gauges := func() map[string]map[string]float64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(t.Context(), &rm))
		out := map[string]map[string]float64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				add := func(attrs attribute.Set, v float64) {
					mod, _ := attrs.Value(relay.AttrModule)
					require.Equal(t, module, mod.AsString(), "the relay's own module only")
					lane, _ := attrs.Value(relay.AttrLane)
					require.NotEmpty(t, lane.AsString(), m.Name)
					if out[m.Name] == nil {
						out[m.Name] = map[string]float64{}
					}
					out[m.Name][lane.AsString()] = v
				}
				switch g := m.Data.(type) {
				case metricdata.Gauge[int64]:
					for _, dp := range g.DataPoints {
						add(dp.Attributes, float64(dp.Value))
					}
				case metricdata.Gauge[float64]:
					for _, dp := range g.DataPoints {
						add(dp.Attributes, dp.Value)
					}
				}
			}
		}
		return out
	}
	got := gauges()
	require.Equal(t, map[string]float64{"push": 2, "sms": 0, "mail": 0, relay.LaneUnknown: 0}, got[relay.MetricDue])
	require.Equal(t, map[string]float64{"push": 1, "sms": 0, "mail": 2, relay.LaneUnknown: 1}, got[relay.MetricScheduled],
		"the push record in flight is scheduled: its lease")
	require.Equal(t, map[string]float64{"push": 0, "sms": 2, "mail": 0, relay.LaneUnknown: 0}, got[relay.MetricDead])
	require.Greater(t, got[relay.MetricOldestDue]["push"], 0.0)
	require.Zero(t, got[relay.MetricOldestDue]["mail"])

	close(release)
	stop()
	require.Empty(t, gauges(), "a stopped relay observes nothing")
}

// sumOf adds up the data points of a counter that carry attr.
func sumOf(rm metricdata.ResourceMetrics, name string, attr attribute.KeyValue) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				if v, ok := dp.Attributes.Value(attr.Key); ok && v == attr.Value {
					n += dp.Value
				}
			}
		}
	}
	return n
}
