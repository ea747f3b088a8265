package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the relay's spans and metrics.
const ScopeName = "github.com/tidings-go/tidings/relay"

// Metric names. Their attributes are low-cardinality: the module, the lane
// and the outcome (AttrModule, AttrLane, AttrOutcome), never a record id.
const (
	MetricHanded       = "tidings.relay.handed"
	MetricSettled      = "tidings.relay.settled"
	MetricHandDuration = "tidings.relay.hand.duration"
	MetricLag          = "tidings.relay.lag"
)

// Metric attribute keys.
const (
	AttrModule  = "tidings.module"  // the relay's module
	AttrLane    = "tidings.lane"    // the record's lane; for notifications, the channel
	AttrOutcome = "tidings.outcome" // done, retry, dead, release or unsure
)

type telemetry struct {
	tracer trace.Tracer
	module attribute.KeyValue
	// The attribute sets of each lane seen, built once per lane: building
	// one per record (sorting and hashing) cost more CPU than the rest of
	// the hand's telemetry.
	sets sync.Map // lane -> *laneSets

	handedCount  metric.Int64Counter
	settledCount metric.Int64Counter
	duration     metric.Float64Histogram
	lag          metric.Float64Histogram
}

type laneSets struct {
	lane      metric.MeasurementOption
	byOutcome [outcomeUnsure + 1]metric.MeasurementOption
}

func newTelemetry(cfg Config) (*telemetry, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	t := &telemetry{tracer: tp.Tracer(ScopeName), module: attribute.String(AttrModule, cfg.Module)}
	var err error
	if t.handedCount, err = meter.Int64Counter(MetricHanded, metric.WithUnit("{record}"),
		metric.WithDescription("Records handed to the sink.")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricHanded, err)
	}
	if t.settledCount, err = meter.Int64Counter(MetricSettled, metric.WithUnit("{record}"),
		metric.WithDescription("Answers for handed records, by outcome (done, retry, dead, release, unsure).")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricSettled, err)
	}
	if t.duration, err = meter.Float64Histogram(MetricHandDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from the hand to the sink's answer.")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricHandDuration, err)
	}
	if t.lag, err = meter.Float64Histogram(MetricLag, metric.WithUnit("s"),
		metric.WithDescription("Time from staging (database clock) to the hand.")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricLag, err)
	}
	return t, nil
}

// of returns the attribute sets of lane.
func (t *telemetry) of(lane string) *laneSets {
	if s, ok := t.sets.Load(lane); ok {
		return s.(*laneSets)
	}
	l := attribute.String(AttrLane, lane)
	s := &laneSets{lane: metric.WithAttributeSet(attribute.NewSet(t.module, l))}
	for o := range s.byOutcome {
		s.byOutcome[o] = metric.WithAttributeSet(attribute.NewSet(t.module, l, attribute.String(AttrOutcome, outcome(o).String())))
	}
	actual, _ := t.sets.LoadOrStore(lane, s)
	return actual.(*laneSets)
}

func (t *telemetry) handed(ctx context.Context, lane string, lag time.Duration) {
	s := t.of(lane)
	t.handedCount.Add(ctx, 1, s.lane)
	t.lag.Record(ctx, lag.Seconds(), s.lane)
}

func (t *telemetry) finished(ctx context.Context, lane string, o outcome, took time.Duration) {
	s := t.of(lane)
	t.duration.Record(ctx, took.Seconds(), s.lane)
	t.settledCount.Add(ctx, 1, s.byOutcome[o])
}

func (t *telemetry) settled(ctx context.Context, lane string, o outcome) {
	t.settledCount.Add(ctx, 1, t.of(lane).byOutcome[o])
}
