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

	"github.com/tidings-go/tidings/internal/buckets"
)

// ScopeName is the instrumentation scope of the relay's spans and metrics.
const ScopeName = "github.com/tidings-go/tidings/relay"

// Metric names. Their attributes are low-cardinality: the module, the lane
// and the outcome (AttrModule, AttrLane, AttrOutcome), never a record id.
// The histograms' buckets run from a millisecond to ten minutes.
const (
	MetricHanded       = "tidings.relay.handed"        // counter: records handed to the sink
	MetricSettled      = "tidings.relay.settled"       // counter: answers, by outcome
	MetricHandDuration = "tidings.relay.hand.duration" // histogram: hand to answer, in seconds
	MetricLag          = "tidings.relay.lag"           // histogram: staging to hand, in seconds
)

// Gauges of the outbox, observed by each supervisor for its module, per
// lane, from one Outbox.Stats statement per collection. Every relay of a
// module observes the same figures: aggregate them with max, not sum.
const (
	MetricDue       = "tidings.relay.due"        // pending records due now (LaneStats.Due)
	MetricScheduled = "tidings.relay.scheduled"  // pending records due later, those in flight included (LaneStats.Scheduled)
	MetricOldestDue = "tidings.relay.oldest_due" // seconds the longest-waiting due record has waited (LaneStats.OldestDue)
	MetricDead      = "tidings.relay.dead"       // dead records (LaneStats.Dead)
)

// Metric attribute keys.
const (
	AttrModule  = "tidings.module"  // the relay's module
	AttrLane    = "tidings.lane"    // the record's lane; for notifications, the channel; LaneUnknown for none
	AttrOutcome = "tidings.outcome" // done, retry, dead, release or unsure
)

// LaneUnknown is the AttrLane of a record staged without a lane (for a
// notification, a request whose channel the relay was not told), so that
// no series carries an empty value, which Prometheus would drop.
const LaneUnknown = "unknown"

// laneAttr is the AttrLane of lane.
func laneAttr(lane string) attribute.KeyValue {
	if lane == "" {
		lane = LaneUnknown
	}
	return attribute.String(AttrLane, lane)
}

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

	meter                metric.Meter
	due, scheduled, dead metric.Int64ObservableGauge
	oldestDue            metric.Float64ObservableGauge
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
	t := &telemetry{tracer: tp.Tracer(ScopeName), module: attribute.String(AttrModule, cfg.Module), meter: meter}
	var err error
	if t.handedCount, err = meter.Int64Counter(MetricHanded, metric.WithUnit("{record}"),
		metric.WithDescription("Records handed to the sink.")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricHanded, err)
	}
	if t.settledCount, err = meter.Int64Counter(MetricSettled, metric.WithUnit("{record}"),
		metric.WithDescription("Answers for handed records, by outcome (done, retry, dead, release, unsure).")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricSettled, err)
	}
	if t.duration, err = meter.Float64Histogram(MetricHandDuration, metric.WithUnit("s"), buckets.Option(),
		metric.WithDescription("Time from the hand to the sink's answer.")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricHandDuration, err)
	}
	if t.lag, err = meter.Float64Histogram(MetricLag, metric.WithUnit("s"), buckets.Option(),
		metric.WithDescription("Time from staging (database clock) to the hand.")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricLag, err)
	}
	for _, g := range []struct {
		gauge       *metric.Int64ObservableGauge
		name, about string
	}{
		{&t.due, MetricDue, "Pending records due now."},
		{&t.scheduled, MetricScheduled, "Pending records due later, those in flight included."},
		{&t.dead, MetricDead, "Dead records."},
	} {
		if *g.gauge, err = meter.Int64ObservableGauge(g.name, metric.WithUnit("{record}"), metric.WithDescription(g.about)); err != nil {
			return nil, fmt.Errorf("relay: metric %s: %w", g.name, err)
		}
	}
	if t.oldestDue, err = meter.Float64ObservableGauge(MetricOldestDue, metric.WithUnit("s"),
		metric.WithDescription("How long the longest-waiting due record has waited; 0 when none is due.")); err != nil {
		return nil, fmt.Errorf("relay: metric %s: %w", MetricOldestDue, err)
	}
	return t, nil
}

// observe has every collection of the gauges read them from one call of
// stats (the module's Outbox.Stats), until the registration is undone.
func (t *telemetry) observe(stats func(context.Context) (Stats, error)) (metric.Registration, error) {
	reg, err := t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := stats(ctx)
		if err != nil {
			return fmt.Errorf("relay: gauges: %w", err)
		}
		for _, l := range st.Lanes {
			set := t.of(l.Lane).lane
			o.ObserveInt64(t.due, l.Due, set)
			o.ObserveInt64(t.scheduled, l.Scheduled, set)
			o.ObserveInt64(t.dead, l.Dead, set)
			o.ObserveFloat64(t.oldestDue, l.OldestDue.Seconds(), set)
		}
		return nil
	}, t.due, t.scheduled, t.dead, t.oldestDue)
	if err != nil {
		return nil, fmt.Errorf("relay: gauges: %w", err)
	}
	return reg, nil
}

// of returns the attribute sets of lane.
func (t *telemetry) of(lane string) *laneSets {
	if s, ok := t.sets.Load(lane); ok {
		return s.(*laneSets)
	}
	l := laneAttr(lane)
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
