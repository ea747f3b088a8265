package relay_test

import (
	"context"
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
	for _, a := range consumer.Attributes() {
		require.NotContains(t, a.Value.Emit(), `"n"`, "no payload in span attributes")
	}

	var rm metricdata.ResourceMetrics
	require.Eventually(t, func() bool {
		require.NoError(t, reader.Collect(t.Context(), &rm))
		return sumOf(rm, relay.MetricSettled, attribute.String("tidings.outcome", "done")) == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, sumOf(rm, relay.MetricHanded, attribute.String("tidings.module", module)))
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
