package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// counter is an in-memory delivery that answers Delivered and counts what
// it is handed, per request, with atomics only: no lock, no record of the
// requests, so it costs the drain next to nothing and stays small at a
// million requests. It can also time when each delivery starts.
type counter struct {
	ids    []uuid.UUID // by index; nil skips the id check
	counts []atomic.Int32
	starts []atomic.Int64 // ns since base at the first start; nil: not timed
	base   time.Time
	total  atomic.Int64
	bad    atomic.Int64 // requests without a known index or with another id
	want   int64
	done   chan struct{} // closed when total reaches want
	once   sync.Once
}

// newCounter expects want deliveries of requests 0 to n-1.
func newCounter(n int, ids []uuid.UUID, timed bool, base time.Time) *counter {
	c := &counter{ids: ids, counts: make([]atomic.Int32, n), base: base, want: int64(n), done: make(chan struct{})}
	if timed {
		c.starts = make([]atomic.Int64, n)
	}
	return c
}

// Deliver counts p and answers Delivered.
func (c *counter) Deliver(_ context.Context, p delivery.Pending) delivery.Outcome {
	var now int64
	if c.starts != nil {
		now = int64(time.Since(c.base))
	}
	i, ok := seqOf(p.Data)
	if !ok || i < 0 || i >= len(c.counts) || (c.ids != nil && c.ids[i] != p.ID) {
		c.bad.Add(1)
		return delivery.Delivered()
	}
	if c.starts != nil {
		c.starts[i].CompareAndSwap(0, now)
	}
	c.counts[i].Add(1)
	if c.total.Add(1) == c.want {
		c.once.Do(func() { close(c.done) })
	}
	return delivery.Delivered()
}

// verify fails unless every request was delivered exactly once.
func (c *counter) verify() error {
	if b := c.bad.Load(); b > 0 {
		return fmt.Errorf("verify: %d deliveries of unknown requests", b)
	}
	var errs []error
	for i := range c.counts {
		if n := c.counts[i].Load(); n != 1 {
			errs = append(errs, fmt.Errorf("request %d delivered %d times", i, n))
			if len(errs) == 5 {
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("verify: every request must be delivered once: %w", errors.Join(errs...))
	}
	return nil
}

// declared is a delivery that says what its provider does with a
// repeated idempotency key (delivery.Repeater), as a real module does; the
// dispatcher's CommitAuto follows it.
type declared struct {
	delivery.Delivery
	repeats delivery.Repeat
}

// Repeats returns what d declares.
func (d declared) Repeats() delivery.Repeat { return d.repeats }

// tally is the child's delivery: a total only, so its memory does not
// grow with the backlog it measures. The database checks the rest.
type tally struct {
	total atomic.Int64
	want  int64
	done  chan struct{}
	once  sync.Once
}

func (t *tally) Deliver(_ context.Context, _ delivery.Pending) delivery.Outcome {
	if t.total.Add(1) == t.want {
		t.once.Do(func() { close(t.done) })
	}
	return delivery.Delivered()
}

// timedSink times when the relay hands each request to the dispatcher,
// which then begins the claim's transaction, claims in the inbox and
// calls the delivery: it splits commit-to-delivery-start in two.
type timedSink struct {
	next  *notification.Dispatcher
	base  time.Time
	hands []atomic.Int64 // ns since base at the first hand
}

var (
	_ relay.BatchSink = (*timedSink)(nil)
	_ relay.Preparer  = (*timedSink)(nil)
)

func (t *timedSink) Handle(ctx context.Context, rec relay.Record) relay.Result {
	t.handed(rec, int64(time.Since(t.base)))
	return t.next.Handle(ctx, rec)
}

func (t *timedSink) HandleBatch(ctx context.Context, b *relay.Batch) {
	now := int64(time.Since(t.base))
	for i := range b.Len() {
		t.handed(b.Record(i), now)
	}
	t.next.HandleBatch(ctx, b)
}

func (t *timedSink) Prepare(ctx context.Context, db *sql.DB, cfg relay.Config) error {
	return t.next.Prepare(ctx, db, cfg)
}

// handed notes when rec's request was first handed.
func (t *timedSink) handed(rec relay.Record, now int64) {
	var p struct {
		Data struct {
			Seq *int `json:"seq"`
		} `json:"data"`
	}
	if err := json.Unmarshal(rec.Payload, &p); err == nil && p.Data.Seq != nil && *p.Data.Seq >= 0 && *p.Data.Seq < len(t.hands) {
		t.hands[*p.Data.Seq].CompareAndSwap(0, now)
	}
}
