package recording

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
)

// Delivery is a [delivery.Delivery] that records every request it is handed
// and answers from a script.
//
// Each request is answered with the next outcome of the most specific
// matching script that is not empty: the script for its recipient
// ([Delivery.ScriptRecipient]), then the one for its channel
// ([Delivery.ScriptChannel]), then the general one ([Delivery.Script]). When
// every matching script has run out, the answer is [delivery.Delivered].
//
// A Delivery is safe for concurrent use. The zero value is ready to use, with
// empty scripts; [New] returns one. A Delivery holds no resources and needs no
// closing.
type Delivery struct {
	mu          sync.Mutex
	latency     time.Duration
	requests    []delivery.Pending
	general     []delivery.Outcome
	byChannel   map[string][]delivery.Outcome
	byRecipient map[string][]delivery.Outcome
	// recorded is closed and replaced on every record, waking every Wait
	// blocked on it. nil until the first Wait or record needs it.
	recorded chan struct{}
}

// New returns an empty Delivery: nothing recorded, and every request answered
// Delivered until a script says otherwise.
func New() *Delivery {
	return &Delivery{}
}

// Script appends outcomes to the general script: they answer, in order, the
// requests that no more specific script matches.
func (d *Delivery) Script(outcomes ...delivery.Outcome) {
	d.mu.Lock()
	defer d.mu.Unlock()

	d.general = append(d.general, outcomes...)
}

// ScriptChannel appends outcomes to the script of channel: they answer, in
// order, requests whose Channel is channel and that no recipient script
// matches.
func (d *Delivery) ScriptChannel(channel string, outcomes ...delivery.Outcome) {
	d.mu.Lock()
	defer d.mu.Unlock()

	if d.byChannel == nil {
		d.byChannel = make(map[string][]delivery.Outcome)
	}
	d.byChannel[channel] = append(d.byChannel[channel], outcomes...)
}

// ScriptRecipient appends outcomes to the script of recipient: they answer,
// in order, requests whose Recipient is recipient. It is the most specific
// script and is checked first.
func (d *Delivery) ScriptRecipient(recipient string, outcomes ...delivery.Outcome) {
	d.mu.Lock()
	defer d.mu.Unlock()

	if d.byRecipient == nil {
		d.byRecipient = make(map[string][]delivery.Outcome)
	}
	d.byRecipient[recipient] = append(d.byRecipient[recipient], outcomes...)
}

// SetLatency makes every later Deliver take latency before it answers, as
// a slow provider does; a context that ends first ends the call with
// Retry and the context's error, as a provider call that honours its
// context would. Zero, the default, answers at once.
func (d *Delivery) SetLatency(latency time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.latency = latency
}

// errHang marks the outcome Hang returns.
var errHang = errors.New("recording: a scripted hang")

// Hang returns an outcome to script for a provider that never answers:
// Deliver answers it only once its context ends, with Retry and the
// context's error, so a module's or a dispatcher's timeout and
// cancellation can be tested.
func Hang() delivery.Outcome { return delivery.Retry(errHang) }

// Deliver records p, with copies of p.Data and p.Secrets so that a later
// change by the caller does not change the record (Data's maps and slices
// as JSON decodes them, map[string]any and []any, are copied at every
// depth; values of other types are shared), and then answers with the
// next outcome of the most specific matching script that is not empty,
// or [delivery.Delivered] when every matching script has run out. The
// request is recorded before it is answered, so a Wait that returns has
// seen it.
//
// As a provider's module would, Deliver sends nothing on a context that
// has already ended: it answers Retry with the context's cause, and
// neither records p nor uses a script's outcome. Otherwise it answers at
// once unless SetLatency or a scripted Hang says otherwise; then it
// honours ctx. A scripted zero [delivery.Outcome] is answered as it is,
// for testing how a dispatcher treats an invalid answer.
func (d *Delivery) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if ctx.Err() != nil {
		return delivery.Retry(fmt.Errorf("recording: %w", context.Cause(ctx)))
	}
	outcome, latency := d.record(p)
	var wait <-chan time.Time
	switch {
	case outcome.Kind() == delivery.KindRetry && errors.Is(outcome.Reason(), errHang):
		// Only the context ends it.
	case latency > 0:
		timer := time.NewTimer(latency)
		defer timer.Stop()
		wait = timer.C
	default:
		return outcome
	}
	select {
	case <-wait:
		return outcome
	case <-ctx.Done():
		return delivery.Retry(fmt.Errorf("recording: %w", context.Cause(ctx)))
	}
}

// record records p and returns its scripted answer and the latency.
func (d *Delivery) record(p delivery.Pending) (delivery.Outcome, time.Duration) {
	p = clone(p)

	d.mu.Lock()
	defer d.mu.Unlock()

	d.requests = append(d.requests, p)
	if d.recorded != nil {
		close(d.recorded)
		d.recorded = nil
	}

	if outcome, ok := pop(d.byRecipient, p.Recipient); ok {
		return outcome, d.latency
	}
	if outcome, ok := pop(d.byChannel, p.Channel); ok {
		return outcome, d.latency
	}
	if len(d.general) > 0 {
		outcome := d.general[0]
		d.general = d.general[1:]
		return outcome, d.latency
	}
	return delivery.Delivered(), d.latency
}

// pop removes and returns the first outcome scripted under key, if any.
func pop(scripts map[string][]delivery.Outcome, key string) (delivery.Outcome, bool) {
	script := scripts[key]
	if len(script) == 0 {
		return delivery.Outcome{}, false
	}
	if len(script) == 1 {
		delete(scripts, key)
	} else {
		scripts[key] = script[1:]
	}
	return script[0], true
}

// Requests returns a copy of every request recorded so far, in the order
// they arrived. Changing the result, including its Data and Secrets maps
// (and the maps and slices in Data, as Deliver copied them), does not
// change the record.
func (d *Delivery) Requests() []delivery.Pending {
	d.mu.Lock()
	defer d.mu.Unlock()

	return clonePending(d.requests)
}

// Len returns how many requests were recorded.
func (d *Delivery) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()

	return len(d.requests)
}

// Wait blocks until at least n requests were recorded or ctx ends. It
// returns copies of the first n requests, in the order they arrived, or, if
// ctx ended first, an error wrapping ctx.Err() that says how many arrived:
// "recording: waited for 3 requests, got 1: context deadline exceeded".
// When n requests are already recorded, Wait returns them whatever the state
// of ctx. A Wait without a deadline on ctx can block forever.
func (d *Delivery) Wait(ctx context.Context, n int) ([]delivery.Pending, error) {
	for {
		d.mu.Lock()
		if len(d.requests) >= n {
			got := clonePending(d.requests[:max(n, 0)])
			d.mu.Unlock()
			return got, nil
		}
		if d.recorded == nil {
			d.recorded = make(chan struct{})
		}
		recorded := d.recorded
		d.mu.Unlock()

		select {
		case <-recorded:
		case <-ctx.Done():
			return nil, fmt.Errorf("recording: waited for %d requests, got %d: %w", n, d.Len(), ctx.Err())
		}
	}
}

// Count returns how many recorded requests have this ID: 1 when a request
// was handed exactly once.
func (d *Delivery) Count(id uuid.UUID) int {
	d.mu.Lock()
	defer d.mu.Unlock()

	count := 0
	for _, p := range d.requests {
		if p.ID == id {
			count++
		}
	}
	return count
}

// clonePending copies requests, each as clone does.
func clonePending(requests []delivery.Pending) []delivery.Pending {
	out := make([]delivery.Pending, len(requests))
	for i, p := range requests {
		out[i] = clone(p)
	}
	return out
}

// clone returns p with its own Secrets and Data: Data's map[string]any and
// []any values copied at every depth.
func clone(p delivery.Pending) delivery.Pending {
	p.Secrets = maps.Clone(p.Secrets)
	if p.Data != nil {
		p.Data = cloneValue(p.Data).(map[string]any)
	}
	return p
}

// cloneValue copies v if it is a map[string]any or an []any, with its
// values; any other value is returned as it is.
func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = cloneValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	default:
		return v
	}
}

var _ delivery.Delivery = (*Delivery)(nil)
