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
	rcfg.TracerProvider = tp
	b.runWith(t, rcfg, b.dispatcher(t, cfg))

	const secret = "secret-recipient@example.com"
	ctx, parent := tp.Tracer("app").Start(t.Context(), "confirm booking")
	req := mailTo(secret)
	req.Data = map[string]any{"code": "secret-data-123"}
	ids, err := b.ob.StageBatch(ctx, b.db, []relay.Message{
		must(req.Message(module)), must(notification.Request{Channel: "sms", Recipient: "+1555"}.Message(module))})
	require.NoError(t, err)
	parent.End()
	b.waitSettled(t, ids[0])
	b.waitSettled(t, ids[1])

	var deliverSpans []sdktrace.ReadOnlySpan
	consumers := map[trace.SpanID]bool{}
	require.Eventually(t, func() bool {
		deliverSpans = deliverSpans[:0]
		for _, s := range spans.GetSpans().Snapshots() {
			if strings.HasPrefix(s.Name(), "deliver ") {
				deliverSpans = append(deliverSpans, s)
			}
			if s.SpanKind() == trace.SpanKindConsumer {
				consumers[s.SpanContext().SpanID()] = true
			}
		}
		return len(deliverSpans) == 3 // mail once, sms twice
	}, 5*time.Second, 10*time.Millisecond)
	for _, s := range deliverSpans {
		require.Equal(t, trace.SpanKindInternal, s.SpanKind())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID(), "inside the staging write's trace")
		require.True(t, consumers[s.Parent().SpanID()], "a child of the relay's consumer span")
		for _, a := range s.Attributes() {
			require.NotContains(t, a.Value.Emit(), "secret", "no recipient or data in span attributes")
		}
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	count := func(channel, outcome string) int64 {
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != notification.MetricOutcomes {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					ch, _ := dp.Attributes.Value("tidings.channel")
					out, _ := dp.Attributes.Value("tidings.outcome")
					if ch.AsString() == channel && out.AsString() == outcome {
						n += dp.Value
					}
				}
			}
		}
		return n
	}
	require.EqualValues(t, 1, count("mail", "delivered"))
	require.EqualValues(t, 1, count("sms", "retried"))
	require.EqualValues(t, 1, count("sms", "rejected"))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					for _, kv := range dp.Attributes.ToSlice() {
						require.Contains(t, []attribute.Key{"tidings.channel"}, kv.Key, "low-cardinality attributes only")
					}
				}
			}
		}
	}
}
