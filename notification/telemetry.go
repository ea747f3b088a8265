package notification

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/delivery"
)

// ScopeName is the instrumentation scope of the dispatcher's spans and
// metrics.
const ScopeName = "github.com/tidings-go/tidings/notification"

// Metric names. Their attributes are the channel and the outcome: never a
// recipient, a request id or data.
const (
	MetricOutcomes         = "tidings.notification.outcomes"
	MetricDeliveryDuration = "tidings.notification.delivery.duration"
	MetricLag              = "tidings.notification.lag"

	attrChannel = "tidings.channel"
	attrOutcome = "tidings.outcome"
)

// Outcomes counted by MetricOutcomes.
const (
	outcomeDelivered = "delivered"
	outcomeRetried   = "retried"
	outcomeRejected  = "rejected"
	outcomeDead      = "dead"
)

type telemetry struct {
	tracer trace.Tracer
	// The attribute sets of every registered channel ("" for requests no
	// channel takes), built once: building one per request (sorting and
	// hashing) cost more CPU than the rest of the request's telemetry.
	channels map[string]metric.MeasurementOption
	outcomes map[[2]string]metric.MeasurementOption

	outcomeCount metric.Int64Counter
	duration     metric.Float64Histogram
	lagHist      metric.Float64Histogram
}

func newTelemetry(cfg Config) (telemetry, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	t := telemetry{
		tracer:   tp.Tracer(ScopeName),
		channels: map[string]metric.MeasurementOption{},
		outcomes: map[[2]string]metric.MeasurementOption{},
	}
	for _, channel := range append(slices.Collect(maps.Keys(cfg.Deliveries)), "") {
		ch := attribute.String(attrChannel, channel)
		t.channels[channel] = metric.WithAttributeSet(attribute.NewSet(ch))
		for _, o := range []string{outcomeDelivered, outcomeRetried, outcomeRejected, outcomeDead} {
			t.outcomes[[2]string{channel, o}] = metric.WithAttributeSet(attribute.NewSet(ch, attribute.String(attrOutcome, o)))
		}
	}
	var err error
	if t.outcomeCount, err = meter.Int64Counter(MetricOutcomes, metric.WithUnit("{request}"),
		metric.WithDescription("Requests by outcome: delivered, retried, rejected, dead.")); err != nil {
		return t, fmt.Errorf("notification: metric %s: %w", MetricOutcomes, err)
	}
	if t.duration, err = meter.Float64Histogram(MetricDeliveryDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a delivery took to answer.")); err != nil {
		return t, fmt.Errorf("notification: metric %s: %w", MetricDeliveryDuration, err)
	}
	if t.lagHist, err = meter.Float64Histogram(MetricLag, metric.WithUnit("s"),
		metric.WithDescription("Time from staging to the start of a delivery attempt.")); err != nil {
		return t, fmt.Errorf("notification: metric %s: %w", MetricLag, err)
	}
	return t, nil
}

func (t telemetry) outcome(ctx context.Context, channel, outcome string) {
	t.outcomeCount.Add(ctx, 1, t.outcomes[[2]string{channel, outcome}])
}

func (t telemetry) lag(ctx context.Context, channel string, waited time.Duration) {
	t.lagHist.Record(ctx, waited.Seconds(), t.channels[channel])
}

// startSpan starts the span of one delivery attempt, inside the relay's
// consumer span. It names no recipient and carries no data.
func (t telemetry) startSpan(ctx context.Context, p delivery.Pending) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "deliver "+p.Channel, trace.WithAttributes(
		attribute.String(attrChannel, p.Channel),
		attribute.String("messaging.message.id", p.ID.String()),
		attribute.Int("tidings.attempt", p.Attempt),
	))
}

func (t telemetry) finished(ctx context.Context, span trace.Span, channel string, out delivery.Outcome, took time.Duration) {
	t.duration.Record(ctx, took.Seconds(), t.channels[channel])
	span.SetAttributes(attribute.String(attrOutcome, out.Kind().String()))
	if out.Kind() != delivery.KindDelivered {
		span.SetStatus(codes.Error, out.Kind().String())
	}
}
