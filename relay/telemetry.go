package relay

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Metric and attribute names. Attributes are low-cardinality: the module
// and the outcome, never a record id.
const (
	MetricHanded       = "tidings.relay.handed"
	MetricSettled      = "tidings.relay.settled"
	MetricHandDuration = "tidings.relay.hand.duration"
	MetricLag          = "tidings.relay.lag"

	attrModule  = "tidings.module"
	attrOutcome = "tidings.outcome"
)

type telemetry struct {
	tracer trace.Tracer
	// The attribute sets, built once: building one per record (sorting and
	// hashing) cost more CPU than the rest of the hand's telemetry.
	module       metric.MeasurementOption
	byOutcome    [outcomeUnsure + 1]metric.MeasurementOption
	handedCount  metric.Int64Counter
	settledCount metric.Int64Counter
	duration     metric.Float64Histogram
	lag          metric.Float64Histogram
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
	module := attribute.String(attrModule, cfg.Module)
	t := telemetry{tracer: tp.Tracer(ScopeName), module: metric.WithAttributeSet(attribute.NewSet(module))}
	for o := range t.byOutcome {
		t.byOutcome[o] = metric.WithAttributeSet(attribute.NewSet(module, attribute.String(attrOutcome, outcome(o).String())))
	}
	var err error
	if t.handedCount, err = meter.Int64Counter(MetricHanded, metric.WithUnit("{record}"),
		metric.WithDescription("Records handed to the sink.")); err != nil {
		return t, fmt.Errorf("relay: metric %s: %w", MetricHanded, err)
	}
	if t.settledCount, err = meter.Int64Counter(MetricSettled, metric.WithUnit("{record}"),
		metric.WithDescription("Answers for handed records, by outcome (done, retry, dead).")); err != nil {
		return t, fmt.Errorf("relay: metric %s: %w", MetricSettled, err)
	}
	if t.duration, err = meter.Float64Histogram(MetricHandDuration, metric.WithUnit("s"),
		metric.WithDescription("Time the sink took to answer.")); err != nil {
		return t, fmt.Errorf("relay: metric %s: %w", MetricHandDuration, err)
	}
	if t.lag, err = meter.Float64Histogram(MetricLag, metric.WithUnit("s"),
		metric.WithDescription("Time from staging (database clock) to the hand.")); err != nil {
		return t, fmt.Errorf("relay: metric %s: %w", MetricLag, err)
	}
	return t, nil
}

func (t telemetry) handed(ctx context.Context, lag time.Duration) {
	t.handedCount.Add(ctx, 1, t.module)
	t.lag.Record(ctx, lag.Seconds(), t.module)
}

func (t telemetry) finished(ctx context.Context, o outcome, took time.Duration) {
	t.duration.Record(ctx, took.Seconds(), t.module)
	t.settled(ctx, o)
}

func (t telemetry) settled(ctx context.Context, o outcome) {
	t.settledCount.Add(ctx, 1, t.byOutcome[o])
}
