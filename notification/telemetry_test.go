package notification_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

func TestTelemetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg := b.config()
	cfg.TracerProvider, cfg.MeterProvider = tp, mp
	cfg.Policy.MaxAttempts = 2
	b.sms.Script(delivery.Retry(errors.New("busy")), delivery.Reject(errors.New("invalid number")))
	rcfg := b.relayConfig(t)
	rcfg.TracerProvider, rcfg.MeterProvider = tp, mp
	b.runWith(t, rcfg, b.dispatcher(t, cfg))

	const secret = "secret-recipient@example.com"
	ctx, parent := tp.Tracer("app").Start(t.Context(), "confirm booking")
	req := mailTo(secret)
	req.Data = map[string]any{"code": "secret-data-123"}
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: b.schema, TracerProvider: tp})
	require.NoError(t, err)
	ids, err := ob.StageBatch(ctx, b.db, []relay.Message{
		must(req.Message(module)), must(notification.Request{Channel: "sms", Recipient: "+1555"}.Message(module))})
	require.NoError(t, err)
	parent.End()
	b.waitSettled(t, ids[0])
	b.waitSettled(t, ids[1])

	// One span per delivery: the consumer span, inside the staging
	// write's trace and linked to the producer span of its request.
	var deliverSpans []sdktrace.ReadOnlySpan
	producers := map[trace.SpanID]bool{}
	require.Eventually(t, func() bool {
		deliverSpans = deliverSpans[:0]
		for _, s := range spans.GetSpans().Snapshots() {
			if strings.HasPrefix(s.Name(), "deliver ") {
				deliverSpans = append(deliverSpans, s)
			}
			if s.SpanKind() == trace.SpanKindProducer {
				producers[s.SpanContext().SpanID()] = true
			}
		}
		return len(deliverSpans) == 3 // mail once, sms twice
	}, 5*time.Second, 10*time.Millisecond)
	for _, s := range deliverSpans {
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID(), "inside the staging write's trace")
		require.True(t, producers[s.Parent().SpanID()], "a child of the producer span")
		require.Len(t, s.Links(), 1)
		require.True(t, producers[s.Links()[0].SpanContext.SpanID()], "linked to the producer span")
		for _, a := range s.Attributes() {
			require.NotContains(t, a.Value.Emit(), "secret", "no recipient or data in span attributes")
		}
	}
	for _, s := range spans.GetSpans().Snapshots() {
		require.False(t, strings.HasPrefix(s.Name(), "process "), "one span per delivery, not one per layer")
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	// What became of each request is counted once, by the relay, by lane
	// (the channel) and outcome.
	count := func(lane, outcome string) int64 {
		return sumCounter(rm, relay.MetricSettled, relay.AttrLane, lane, relay.AttrOutcome, outcome)
	}
	require.Eventually(t, func() bool {
		require.NoError(t, reader.Collect(t.Context(), &rm))
		return count("sms", "dead") == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, count("mail", "done"))
	require.EqualValues(t, 1, count("sms", "retry"))
	allowed := []attribute.Key{relay.AttrModule, relay.AttrLane, relay.AttrOutcome, notification.AttrChannel, notification.AttrAnswer}
	deliveries := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					for _, kv := range dp.Attributes.ToSlice() {
						require.Contains(t, allowed, kv.Key, "low-cardinality attributes only")
						require.NotEmpty(t, kv.Value.AsString(), "%s: %s", m.Name, kv.Key)
					}
					// From a millisecond to ten minutes, not the SDK's
					// default that holds every delivery under 5 s in one.
					require.Equal(t, 0.001, dp.Bounds[0], m.Name)
					require.Equal(t, 600.0, dp.Bounds[len(dp.Bounds)-1], m.Name)
					if m.Name == notification.MetricDeliveryDuration {
						deliveries += int(dp.Count)
					}
				}
			}
		}
	}
	require.Equal(t, 3, deliveries, "mail once, sms twice")
}
