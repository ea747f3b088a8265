package notification

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/retrypolicy"
)

// Defaults of Config.
const (
	// DeliveryTimeoutDefault is a dispatcher's delivery timeout until the
	// relay that runs it tells its HandTimeout (relay.Preparer): then the
	// default is five sixths of that, which leaves the claim and the
	// commit around the delivery the rest (25 s of the relay's default
	// 30 s).
	DeliveryTimeoutDefault = relay.HandTimeoutDefault * 5 / 6
	// InboxRetentionDefault outlives the relay's RetentionDefault, so a
	// claim outlives every redelivery of its request.
	InboxRetentionDefault = 4 * relay.RetentionDefault
)

// ErrConfig marks an invalid Config; the error names the field.
var ErrConfig = errors.New("notification: invalid config")

// Config configures a Dispatcher. The zero value of each field means its
// default; NewDispatcher copies it and never changes the caller's.
type Config struct {
	// Consumer names the dispatcher in the inbox: a lower-case identifier.
	// Two dispatchers with the same Consumer deliver a request once between
	// them. Required.
	Consumer string

	// Deliveries maps each channel (a lower-case identifier) to the
	// delivery that performs it. At least one is required. The map is
	// copied.
	Deliveries map[string]delivery.Delivery

	// Schema holds the outbox and inbox tables. Default "tidings".
	Schema string

	// Policy says how often and how far apart a request that answered
	// Retry is offered again. The zero Policy is retrypolicy's defaults:
	// 10 attempts, 15 s doubling to at most 1 h, randomised to 75-100 %.
	// Its MaxAttempts must stay below the relay's MaxHands, which also
	// counts crashes; Supervise refuses to start otherwise.
	Policy retrypolicy.Policy

	// DeliveryTimeout ends the context of each delivery call; an overrun is
	// a Retry. It must be shorter than the relay's HandTimeout, leaving room
	// for the claim and the commit; Supervise refuses to start otherwise.
	// Default five sixths of the relay's HandTimeout (25 s of 30 s).
	DeliveryTimeout time.Duration

	// GroupSize is the most requests whose inbox claims share one
	// transaction and one commit. 0 or 1 (the default) means one
	// transaction per request. Above 1, requests handed at the same time
	// are claimed together, delivered concurrently, and committed once
	// the slowest answered or DeliveryTimeout passed: far fewer commits,
	// at a price: a failed commit offers every delivered request of the
	// group again (with its own idempotency key), and deliveries get no
	// transaction through delivery.TxFrom.
	GroupSize int

	// ChannelLimit is the most deliveries of one channel this dispatcher
	// runs at once; 0 (the default) means no limit but the relay's
	// Concurrency. A request handed while its channel is at the limit is
	// given back unstarted (relay.Later) and handed again after
	// ChannelBusyDelay, without counting an attempt. Set it below the
	// relay's Concurrency so that a slow provider holds at most that many
	// of the relay's slots and the other channels keep flowing.
	ChannelLimit int

	// InboxRetention is how long claims are kept before Purge removes them:
	// longer than any redelivery of a request. Supervise refuses to start
	// unless it exceeds the relay's Lease plus the Policy's longest retry
	// schedule (retrypolicy.Policy.Span). Default 28 days.
	InboxRetention time.Duration

	// Logger receives the dispatcher's logs. Nil discards them.
	Logger *slog.Logger

	// TracerProvider creates the delivery span. Nil means the global one.
	TracerProvider trace.TracerProvider

	// MeterProvider creates the dispatcher's metrics. Nil means the global
	// one.
	MeterProvider metric.MeterProvider
}

// Dispatcher is the relay sink that delivers notification requests. It is
// safe for concurrent use; run it with relay.Supervise.
type Dispatcher struct {
	db         *sql.DB
	cfg        Config
	deliveries map[string]delivery.Delivery
	ob         *relay.Outbox
	inbox      *inbox.Inbox
	log        *slog.Logger
	tel        telemetry
	derived    atomic.Int64             // the default DeliveryTimeout for the relays prepared; 0 before any
	queue      queue                    // requests waiting for a group (GroupSize > 1)
	inFlight   map[string]*atomic.Int64 // deliveries running, by channel (ChannelLimit > 0)
}

var (
	_ relay.Sink     = (*Dispatcher)(nil)
	_ relay.Preparer = (*Dispatcher)(nil)
	_ relay.Purger   = (*Dispatcher)(nil)
)

// NewDispatcher returns a dispatcher that delivers through cfg.Deliveries
// and claims in db's inbox. It checks cfg and starts nothing.
func NewDispatcher(db *sql.DB, cfg *Config) (*Dispatcher, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.InboxRetention == 0 {
		c.InboxRetention = InboxRetentionDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: c.Schema})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ib, err := inbox.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	tel, err := newTelemetry(c)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		db:         db,
		cfg:        c,
		deliveries: maps.Clone(c.Deliveries),
		inFlight:   inFlight(c),
		ob:         ob,
		inbox:      ib,
		log:        c.Logger.With("component", "notification", "consumer", c.Consumer),
		tel:        tel,
	}
	return d, nil
}

// Prepare checks the dispatcher's Config against the Config of the relay
// that runs it, and derives the delivery timeout from the relay's
// HandTimeout unless Config.DeliveryTimeout is set. relay.Supervise calls
// it before it starts; the error names both settings that disagree.
func (d *Dispatcher) Prepare(_ context.Context, _ *sql.DB, rc relay.Config) error {
	schema := cmp.Or(d.cfg.Schema, relay.SchemaDefault)
	if schema != rc.Schema {
		return fmt.Errorf("%w: Schema %q differs from the relay's Config.Schema %q: the dispatcher would claim in another schema's inbox",
			ErrConfig, schema, rc.Schema)
	}
	if attempts := d.cfg.Policy.Attempts(); attempts >= rc.MaxHands {
		return fmt.Errorf("%w: Policy.MaxAttempts (%d) must be below the relay's Config.MaxHands (%d): every attempt is a hand, "+
			"and a request retried that often would be dead as a crash loop instead of with its last reason",
			ErrConfig, attempts, rc.MaxHands)
	}
	timeout := d.cfg.DeliveryTimeout
	if timeout == 0 {
		timeout = rc.HandTimeout * 5 / 6
	}
	if timeout >= rc.HandTimeout {
		return fmt.Errorf("%w: DeliveryTimeout (%s) must be shorter than the relay's Config.HandTimeout (%s), "+
			"which also bounds the claim and the commit around the delivery", ErrConfig, timeout, rc.HandTimeout)
	}
	if span := d.cfg.Policy.Span(); d.cfg.InboxRetention <= rc.Lease+span {
		return fmt.Errorf("%w: InboxRetention (%s) must exceed the relay's Config.Lease (%s) plus Policy's longest retry schedule (%s): "+
			"a claim purged before its request's last redelivery lets it be delivered twice",
			ErrConfig, d.cfg.InboxRetention, rc.Lease, span)
	}
	// A dispatcher that serves several relays keeps the shortest.
	for {
		old := d.derived.Load()
		if old != 0 && old <= int64(timeout) || d.derived.CompareAndSwap(old, int64(timeout)) {
			return nil
		}
	}
}

// deliveryTimeout is the DeliveryTimeout in effect: the configured one,
// else the one derived from the relays' HandTimeout.
func (d *Dispatcher) deliveryTimeout() time.Duration {
	return cmp.Or(d.cfg.DeliveryTimeout, time.Duration(d.derived.Load()), DeliveryTimeoutDefault)
}

func (c Config) validate() error {
	if err := ident.Check("Consumer", c.Consumer); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(c.Deliveries) == 0 {
		return fmt.Errorf("%w: Deliveries is empty", ErrConfig)
	}
	for channel, d := range c.Deliveries {
		if err := ident.Check("Deliveries channel", channel); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if d == nil {
			return fmt.Errorf("%w: Deliveries[%q] is nil", ErrConfig, channel)
		}
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: Policy: %w", ErrConfig, err)
	}
	if c.DeliveryTimeout < 0 {
		return fmt.Errorf("%w: DeliveryTimeout is negative", ErrConfig)
	}
	if c.GroupSize < 0 {
		return fmt.Errorf("%w: GroupSize is negative", ErrConfig)
	}
	if c.ChannelLimit < 0 {
		return fmt.Errorf("%w: ChannelLimit is negative", ErrConfig)
	}
	if c.InboxRetention < 0 {
		return fmt.Errorf("%w: InboxRetention is negative", ErrConfig)
	}
	return nil
}

// Handle delivers one record: the relay calls it. A record of another kind
// than Kind is accepted and ignored.
func (d *Dispatcher) Handle(ctx context.Context, rec relay.Record) relay.Result {
	if rec.Kind != Kind {
		return relay.Done()
	}
	req, err := decode(rec.Payload)
	if err != nil {
		d.tel.outcome(ctx, "", outcomeDead)
		return relay.Dead(fmt.Errorf("undecodable notification request: %w", err))
	}
	dl, ok := d.deliveries[req.Channel]
	if !ok {
		d.tel.outcome(ctx, "", outcomeDead)
		return relay.Dead(fmt.Errorf("no delivery is registered for channel %q", req.Channel))
	}
	p := job{unsure: rec.Unsure, Pending: delivery.Pending{
		ID:            rec.ID,
		Channel:       req.Channel,
		Recipient:     req.Recipient,
		Template:      req.Template,
		Data:          req.Data,
		CorrelationID: rec.CorrelationID,
		CausationID:   rec.CausationID,
		Attempt:       rec.Attempts + 1,
		StagedAt:      rec.CreatedAt,
	}}
	if !d.enter(req.Channel) {
		return relay.Later(ChannelBusyDelay)
	}
	defer d.leave(req.Channel)
	d.tel.lag(ctx, req.Channel, rec.Waited())
	if d.cfg.GroupSize > 1 {
		return d.grouped(ctx, dl, p)
	}
	return d.once(ctx, dl, p)
}

// ChannelBusyDelay is how long a request whose channel was at
// Config.ChannelLimit waits before it is handed again.
const ChannelBusyDelay = time.Second

func inFlight(c Config) map[string]*atomic.Int64 {
	if c.ChannelLimit == 0 {
		return nil
	}
	m := make(map[string]*atomic.Int64, len(c.Deliveries))
	for channel := range c.Deliveries {
		m[channel] = new(atomic.Int64)
	}
	return m
}

// enter takes one of channel's delivery slots, or reports that it is at
// its limit.
func (d *Dispatcher) enter(channel string) bool {
	n := d.inFlight[channel]
	if n == nil {
		return true
	}
	if n.Add(1) > int64(d.cfg.ChannelLimit) {
		n.Add(-1)
		return false
	}
	return true
}

// leave gives back the slot enter took.
func (d *Dispatcher) leave(channel string) {
	if n := d.inFlight[channel]; n != nil {
		n.Add(-1)
	}
}

// claimTx is the isolation of a claim's transaction, whatever the server's
// default: under read committed a claim that waited for another's commit
// sees it (and answers "already claimed") instead of failing to serialize.
var claimTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// once runs the delivery of p inside one transaction that holds its inbox
// claim, and commits only if it was delivered.
func (d *Dispatcher) once(ctx context.Context, dl delivery.Delivery, p job) relay.Result {
	tx, err := d.db.BeginTx(ctx, claimTx)
	if err != nil {
		return d.unsure(ctx, p, fmt.Errorf("begin the claim's transaction: %w", err))
	}
	defer func() { _ = tx.Rollback() }()
	first, err := d.inbox.Once(ctx, tx, d.cfg.Consumer, p.ID)
	if err != nil {
		return d.unsure(ctx, p, err)
	}
	if !first {
		// A committed claim: delivered before; its settle was lost.
		if err := tx.Commit(); err != nil {
			return d.unsure(ctx, p, fmt.Errorf("commit: %w", err))
		}
		d.log.DebugContext(ctx, "already delivered", "outbox_id", p.ID)
		return relay.Done()
	}

	out := d.deliver(delivery.WithTx(ctx, tx), dl, p)
	var commitErr error
	if out.Kind() == delivery.KindDelivered {
		commitErr = tx.Commit()
	}
	return d.answer(ctx, p, out, commitErr)
}

// answer maps a delivery's outcome, and the commit of its claim, onto the
// relay's result.
func (d *Dispatcher) answer(ctx context.Context, p job, out delivery.Outcome, commitErr error) relay.Result {
	switch out.Kind() {
	case delivery.KindDelivered:
		if commitErr != nil {
			// The provider has the message and the claim may or may not
			// have committed: the next hand finds out, and gives the
			// provider the same idempotency key if it delivers again.
			return d.unsure(ctx, p, fmt.Errorf("delivered, but the claim's commit failed: %w", commitErr))
		}
		d.tel.outcome(ctx, p.Channel, outcomeDelivered)
		return relay.DoneWith(out.Reference())
	case delivery.KindReject:
		d.tel.outcome(ctx, p.Channel, outcomeRejected)
		d.log.ErrorContext(ctx, "delivery rejected; request dead", "outbox_id", p.ID, "channel", p.Channel, "err", out.Reason())
		return relay.Dead(out.Reason())
	case delivery.KindRetry:
		return d.retry(ctx, p, out)
	}
	return d.retry(ctx, p, delivery.Retry(fmt.Errorf("delivery for channel %q answered %s, not an outcome", p.Channel, out)))
}

// retry maps a Retry onto the policy: pending again after its delay (or
// the provider's, if longer), or dead when the attempts are exhausted.
func (d *Dispatcher) retry(ctx context.Context, p job, out delivery.Outcome) relay.Result {
	if d.cfg.Policy.Exhausted(p.Attempt) {
		d.tel.outcome(ctx, p.Channel, outcomeDead)
		return relay.Dead(fmt.Errorf("exhausted after %d attempts: %w", p.Attempt, out.Reason()))
	}
	d.tel.outcome(ctx, p.Channel, outcomeRetried)
	return relay.Retry(max(d.cfg.Policy.Delay(p.Attempt), out.After()), out.Reason())
}

// unsure answers for a failure of the claim's own transaction, which is no
// fault of the delivery: the request is offered again without counting an
// attempt, so a database outage never exhausts it or makes it dead.
func (d *Dispatcher) unsure(ctx context.Context, p job, err error) relay.Result {
	d.tel.outcome(ctx, p.Channel, outcomeRetried)
	d.log.WarnContext(ctx, "claim's transaction failed; offering the request again", "outbox_id", p.ID, "err", err)
	// Backed off by the failures so far: a flapping connection does not
	// spend the relay's MaxUnsure in a minute.
	return relay.Unsure(d.cfg.Policy.Delay(p.unsure+1), err)
}

// job is a request on its way through the dispatcher.
type job struct {
	delivery.Pending
	unsure int // earlier answers Unsure (relay.Record.Unsure)
}

// deliver calls the delivery with the timeout, turning a panic or an
// overrun into a Retry that says so.
func (d *Dispatcher) deliver(ctx context.Context, dl delivery.Delivery, p job) (out delivery.Outcome) {
	ctx, span := d.tel.startSpan(ctx, p.Pending)
	defer span.End()
	timeout := d.deliveryTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("DeliveryTimeout of %s passed", timeout))
	defer cancel()
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			d.log.ErrorContext(ctx, "delivery panicked", "outbox_id", p.ID, "channel", p.Channel, "panic", r)
			out = delivery.Retry(fmt.Errorf("delivery for channel %q panicked: %v", p.Channel, r))
		}
		if out.Kind() != delivery.KindDelivered && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Name the deadline that fired: the delivery's own, or the
			// relay's hand timeout when the claim took long.
			out = delivery.RetryAfter(fmt.Errorf("delivery for channel %q timed out: %w: %v",
				p.Channel, context.Cause(ctx), cmp.Or[any](out.Reason(), "no answer")), out.After())
		}
		d.tel.finished(ctx, span, p.Channel, out, time.Since(start))
	}()
	return dl.Deliver(ctx, p.Pending)
}

// Purge deletes the dispatcher's inbox claims older than InboxRetention.
// The relay supervisor calls it on each purge pass.
func (d *Dispatcher) Purge(ctx context.Context) (int64, error) {
	return d.inbox.Purge(ctx, d.db, d.cfg.InboxRetention)
}

// Status returns what is known of the request id: pending (with its
// attempts, next attempt and last reason: zero attempts means not tried
// yet), processed (delivered: when, and the provider's reference), dead
// (why) or cancelled. It is relay.ErrNotFound for an unknown or purged id.
func (d *Dispatcher) Status(ctx context.Context, id uuid.UUID) (relay.Status, error) {
	return d.ob.Status(ctx, d.db, id)
}

// waitPollMax bounds the pause between two looks of Wait.
const waitPollMax = time.Second

// Wait blocks until the request id is settled (processed, dead or
// cancelled) or ctx ends, and returns its last known status with ctx's
// error in the second case (the zero Status if ctx ended before the first
// look answered).
func (d *Dispatcher) Wait(ctx context.Context, id uuid.UUID) (relay.Status, error) {
	pause := 10 * time.Millisecond
	var last relay.Status
	for {
		st, err := d.Status(ctx, id)
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
		if err != nil || st.Settled() {
			return st, err
		}
		last = st
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(pause):
			pause = min(2*pause, waitPollMax)
		}
	}
}

// Cancel cancels the pending request id and returns its status after the
// attempt: cancelled, or the state it had already reached (processed: it
// was delivered, and the cancel came too late). If a delivery of it is
// running, Cancel waits for it to end: its claim in the inbox decides.
func (d *Dispatcher) Cancel(ctx context.Context, id uuid.UUID) (relay.Status, error) {
	delivered, err := d.cancel(ctx, id)
	if err != nil {
		return relay.Status{ID: id}, err
	}
	if delivered {
		// The claim committed with the delivery; the relay settles the
		// record right after.
		return d.Wait(ctx, id)
	}
	return d.Status(ctx, id)
}

// cancel settles id as cancelled unless a delivery's claim committed
// first, which it reports.
func (d *Dispatcher) cancel(ctx context.Context, id uuid.UUID) (delivered bool, err error) {
	tx, err := d.db.BeginTx(ctx, claimTx)
	if err != nil {
		return false, fmt.Errorf("notification: cancel: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// The claim first, as a delivery takes it: a running delivery holds
	// it until it ends, so the cancel waits for its answer. If the
	// delivery committed, the request was delivered and the cancel is too
	// late; otherwise no delivery can claim it after the cancel.
	first, err := d.inbox.Once(ctx, tx, d.cfg.Consumer, id)
	if err != nil {
		return false, fmt.Errorf("notification: cancel: %w", err)
	}
	if !first {
		return true, nil
	}
	// A record that is no longer pending keeps its state, and no claim:
	// a dead one re-emitted later must still be delivered.
	if cancelled, err := d.ob.Cancel(ctx, tx, id); err != nil || !cancelled {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("notification: cancel: commit: %w", err)
	}
	return false, nil
}
