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
	"github.com/tidings-go/tidings/internal/buckets"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

// ScopeName is the instrumentation scope of the dispatcher's spans and
// metrics.
const ScopeName = "github.com/tidings-go/tidings/notification"

// MetricDeliveryDuration is the time each delivery call took, in seconds,
// by channel and answer (AttrChannel, AttrAnswer), in buckets from a
// millisecond to ten minutes. What became of each request (done,
// retried, dead) is the relay's relay.MetricSettled, by module, lane (the
// channel) and outcome.
const MetricDeliveryDuration = "tidings.notification.delivery.duration"

// MetricDecisions counts the requests a recipient rule stopped or
// deferred, by channel and rule (AttrChannel, AttrRule): a preference or
// a category's default (skipped), quiet hours (deferred), expiry, and a
// dedup key (a duplicate).
const MetricDecisions = "tidings.notification.decisions"

// MetricFeedback counts the providers' reports the dispatcher applied, by
// provider and class (AttrProvider, AttrClass): class our_side is what the
// operator has to fix (credentials, content filtering, sender
// reputation), never a person's address.
const MetricFeedback = "tidings.notification.feedback"

// Metric and span attribute keys. Their values are never a recipient, a
// request id or data.
const (
	AttrChannel  = "tidings.channel"  // the request's channel
	AttrAnswer   = "tidings.answer"   // the delivery's answer: delivered, retry, reject or invalid
	AttrRule     = "tidings.rule"     // the recipient rule that decided: RulePreference, RuleQuietHours, RuleExpiry, RuleDedup, RuleSuppression
	AttrProvider = "tidings.provider" // the provider that reported, such as "resend"
	AttrClass    = "tidings.class"    // what the report means for the address: a feedback.Class
)

type telemetry struct {
	tracer trace.Tracer
	// The attribute sets of every registered channel and answer, built
	// once: building one per request (sorting and hashing) cost more CPU
	// than the rest of the request's telemetry.
	sets      map[string]map[delivery.Kind]metric.MeasurementOption
	ruleSets  map[string]map[string]metric.MeasurementOption // channel, rule
	duration  metric.Float64Histogram
	decisions metric.Int64Counter
	feedback  metric.Int64Counter
}

func newTelemetry(cfg Config) (telemetry, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := telemetry{tracer: tp.Tracer(ScopeName), sets: map[string]map[delivery.Kind]metric.MeasurementOption{},
		ruleSets: map[string]map[string]metric.MeasurementOption{}}
	for _, channel := range slices.Sorted(maps.Keys(cfg.Deliveries)) {
		ch := attribute.String(AttrChannel, channel)
		t.sets[channel] = map[delivery.Kind]metric.MeasurementOption{}
		for _, k := range []delivery.Kind{delivery.KindInvalid, delivery.KindDelivered, delivery.KindRetry, delivery.KindReject} {
			t.sets[channel][k] = metric.WithAttributeSet(attribute.NewSet(ch, attribute.String(AttrAnswer, k.String())))
		}
		t.ruleSets[channel] = map[string]metric.MeasurementOption{}
		for _, rule := range []string{RulePreference, RuleQuietHours, RuleExpiry, RuleDedup, RuleSuppression} {
			t.ruleSets[channel][rule] = metric.WithAttributeSet(attribute.NewSet(ch, attribute.String(AttrRule, rule)))
		}
	}
	var err error
	if t.duration, err = mp.Meter(ScopeName).Float64Histogram(MetricDeliveryDuration, metric.WithUnit("s"), buckets.Option(),
		metric.WithDescription("Time a delivery took to answer.")); err != nil {
		return t, fmt.Errorf("notification: metric %s: %w", MetricDeliveryDuration, err)
	}
	if t.decisions, err = mp.Meter(ScopeName).Int64Counter(MetricDecisions, metric.WithUnit("{request}"),
		metric.WithDescription("Requests a recipient rule stopped or deferred.")); err != nil {
		return t, fmt.Errorf("notification: metric %s: %w", MetricDecisions, err)
	}
	if t.feedback, err = mp.Meter(ScopeName).Int64Counter(MetricFeedback, metric.WithUnit("{report}"),
		metric.WithDescription("Providers' reports applied, by provider and class.")); err != nil {
		return t, fmt.Errorf("notification: metric %s: %w", MetricFeedback, err)
	}
	return t, nil
}

// startSpan starts the consumer span of one delivery attempt: inside the
// staging write's trace that ctx carries, and linked to its producer span.
// It names no recipient and carries no data.
func (t telemetry) startSpan(ctx context.Context, rec *relay.Record, p *delivery.Pending) (context.Context, trace.Span) {
	return rec.StartSpan(ctx, t.tracer, "deliver "+p.Channel,
		attribute.String(AttrChannel, p.Channel), attribute.Int("tidings.attempt", p.Attempt))
}

func (t telemetry) finished(ctx context.Context, span trace.Span, channel string, out delivery.Outcome, took time.Duration) {
	if set, ok := t.sets[channel][out.Kind()]; ok {
		t.duration.Record(ctx, took.Seconds(), set)
	}
	span.SetAttributes(attribute.String(AttrAnswer, out.Kind().String()))
	if out.Kind() != delivery.KindDelivered {
		span.SetStatus(codes.Error, out.Kind().String())
	}
}

// decided counts a request of channel that rule stopped or deferred.
func (t telemetry) decided(channel, rule string) {
	if set, ok := t.ruleSets[channel][rule]; ok {
		t.decisions.Add(context.Background(), 1, set)
	}
}

// reported counts a report of provider applied, of class.
func (t telemetry) reported(provider string, class feedback.Class) {
	t.feedback.Add(context.Background(), 1, metric.WithAttributes(attribute.String(AttrProvider, provider),
		attribute.String(AttrClass, string(class))))
}
