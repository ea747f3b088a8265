package notification

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/validate"
	"github.com/tidings-go/tidings/relay"
)

// ClientConfig configures a Client. The zero value of each field means its
// default.
type ClientConfig struct {
	// Schema holds the outbox and inbox tables. Default "tidings"
	// (tidings.SchemaDefault).
	Schema string

	// Consumer is the dispatcher's Config.Consumer, under whose inbox claim
	// Cancel excludes a delivery. Default ConsumerDefault.
	Consumer string

	// TracerProvider creates the producer span of each staged request. Nil
	// means the global provider.
	TracerProvider trace.TracerProvider
}

// Client is what a process that stages requests and looks after them
// needs, without any delivery: an API server stages inside its writes,
// asks how a request went, cancels one, lists and re-emits dead ones. The
// Dispatcher is only the relay's sink. A Client is safe for concurrent use;
// it does not own db.
type Client struct {
	db       *sql.DB
	ob       *relay.Outbox
	inbox    *inbox.Inbox
	consumer string
	policy   policyQueries
}

// NewClient returns a Client of the tables of cfg.Schema, reached through
// db (which Stage does not use: it writes in the caller's transaction). It
// checks cfg and touches no database.
func NewClient(db *sql.DB, cfg *ClientConfig) (*Client, error) {
	var c ClientConfig
	if cfg != nil {
		c = *cfg
	}
	c.Consumer = cmp.Or(c.Consumer, ConsumerDefault)
	if err := ident.Check("Consumer", c.Consumer); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: c.Schema, TracerProvider: c.TracerProvider})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ib, err := inbox.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Client{db: db, ob: ob, inbox: ib, consumer: c.Consumer, policy: newPolicyQueries(cmp.Or(c.Schema, ident.SchemaDefault))}, nil
}

// defaultClient stages into the default schema for the package-level Stage
// and StageBatch.
var defaultClient, _ = NewClient(nil, nil)

// Stage stages req for module's relay inside tx and returns its id: the
// idempotency key its delivery will give the provider. The request exists
// if and only if tx commits, and the relay of module is woken at that
// commit. Staging renders nothing and calls no provider; it captures the
// trace context and baggage of ctx and its correlation id
// (relay.WithCorrelationID). An invalid request is an ErrInvalidRequest
// naming the field, and nothing is staged.
func (c *Client) Stage(ctx context.Context, tx dbtx.Execer, module string, req Request) (uuid.UUID, error) {
	if err := validate.NotNil("tx", tx); err != nil {
		return uuid.Nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	msg, err := req.Message(module)
	if err != nil {
		return uuid.Nil, err
	}
	return c.ob.Stage(ctx, tx, msg)
}

// StageBatch stages reqs in one statement inside tx: the fan-out of one
// business event into one request per recipient and channel. If any
// request is invalid the error names its index and field, and nothing is
// staged.
func (c *Client) StageBatch(ctx context.Context, tx dbtx.Execer, module string, reqs []Request) ([]uuid.UUID, error) {
	if err := validate.NotNil("tx", tx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	msgs := make([]relay.Message, len(reqs))
	for i, req := range reqs {
		msg, err := req.Message(module)
		if err != nil {
			return nil, fmt.Errorf("requests[%d]: %w", i, err)
		}
		msgs[i] = msg
	}
	return c.ob.StageBatch(ctx, tx, msgs)
}

// Status is what is known of one request: what an on-call engineer asks
// first, and its whole timeline.
type Status struct {
	relay.Status
	// Channel is the request's channel (its relay lane).
	Channel string
	// Outcome is what became of a processed request: delivered, or
	// stopped by a recipient rule (skipped, expired, duplicate,
	// suppressed); "" for a request that is not processed, and for a
	// record of another kind (a provider's report, a receipts record).
	Outcome Outcome
	// Reference is the provider's reference of a delivered request (the
	// relay's Result), or of the request a duplicate duplicates; "" for
	// any other. It is "" too for a request that commits alone (CommitEach)
	// whose delivering hand's settle was lost (a crash between the claim's
	// commit and the settle): only the settle writes it, and the next hand
	// finds the request delivered but not what the provider called it, so
	// a provider's report naming that reference finds no request.
	Reference string
}

// Status returns what is known of the request id: pending (with its
// attempts, next attempt and last reason: zero attempts means not tried
// yet), processed (delivered, with when and the provider's reference, or
// stopped by a recipient rule: see Outcome and the timeline), dead
// (why, and the reason's code) or cancelled, with its correlation and
// trace ids and its timeline, every life of it included: a request that
// died and was re-emitted shows both. It is relay.ErrNotFound for an
// unknown or purged id.
func (c *Client) Status(ctx context.Context, id uuid.UUID) (Status, error) {
	st, err := c.ob.Status(ctx, c.db, id)
	out := Status{Status: st, Channel: st.Lane}
	if st.State == relay.StateProcessed && st.Kind == Kind {
		out.Outcome = outcomeOf(st.Code)
		switch out.Outcome {
		case OutcomeDelivered:
			out.Reference = st.Result
		case OutcomeDuplicate:
			out.Reference = duplicated(st.Timeline)
		}
	}
	return out, err
}

// duplicated is the provider's reference of the request a duplicate
// duplicates, which the duplicate's last done entry keeps.
func duplicated(timeline []relay.Entry) string {
	for _, e := range slices.Backward(timeline) {
		if e.Code == CodeDuplicate {
			ref, _ := e.Detail["reference"].(string)
			return ref
		}
	}
	return ""
}

// Summary is a request in brief, as a list of requests shows it.
type Summary struct {
	relay.Summary
	// Channel is the request's channel (its relay lane).
	Channel string
}

// FindByCorrelation returns the requests staged under the correlation id
// id (relay.WithCorrelationID), oldest first, at most limit of them
// (relay.FindLimitDefault when limit is zero or less; more than
// relay.FindLimitMax is an error): what one write staged, what their
// deliveries staged in turn, and the request whose own id is id (a request
// staged without a correlation id takes its id as one). Records of the
// outbox that are not notification requests are left out. It reads
// through indexes only; use Status for one request by its id.
func (c *Client) FindByCorrelation(ctx context.Context, id string, limit int) ([]Summary, error) {
	found, err := c.ob.FindByCorrelation(ctx, c.db, id, Kind, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Summary, len(found))
	for i, s := range found {
		out[i] = Summary{Summary: s, Channel: s.Lane}
	}
	return out, nil
}

// waitPollMax bounds the pause between two looks of Wait.
const waitPollMax = time.Second

// Wait blocks until the request id is settled (processed, dead or
// cancelled) or ctx ends, and returns its last known status with ctx's
// error in the second case (the zero Status if ctx ended before the first
// look answered).
func (c *Client) Wait(ctx context.Context, id uuid.UUID) (Status, error) {
	pause := 10 * time.Millisecond
	var last Status
	for {
		st, err := c.Status(ctx, id)
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
// When the delivery won, Cancel waits, as Wait does, until its outcome is
// written (with the claim, or by the relay right after it).
func (c *Client) Cancel(ctx context.Context, id uuid.UUID) (Status, error) {
	delivered, err := c.cancel(ctx, id)
	if err != nil {
		return Status{Status: relay.Status{ID: id}}, err
	}
	if delivered {
		return c.Wait(ctx, id)
	}
	return c.Status(ctx, id)
}

// cancel cancels id if it is pending and no delivery claimed it, and
// reports whether a delivery did.
func (c *Client) cancel(ctx context.Context, id uuid.UUID) (delivered bool, err error) {
	tx, err := c.db.BeginTx(ctx, readCommitted)
	if err != nil {
		return false, fmt.Errorf("notification: cancel: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// The claim first, as a delivery takes it: a running delivery holds
	// it until it commits or rolls back, so the cancel waits for its
	// answer. If the delivery committed, the request was delivered and the
	// cancel is too late; otherwise no delivery can claim it after the
	// cancel.
	first, err := c.inbox.Once(ctx, tx, c.consumer, id)
	if err != nil || !first {
		return !first, err
	}
	// A record that is no longer pending keeps its state, and no claim:
	// a dead one re-emitted later must still be delivered.
	if cancelled, err := c.ob.Cancel(ctx, tx, id); err != nil || !cancelled {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("notification: cancel: commit: %w", err)
	}
	return false, nil
}

// DeadFilter selects dead requests. A zero field selects everything on it.
// The dispatcher's other records, the provider reports and receipts it
// applies (channel LaneFeedback), are selected as requests are: one that
// died is listed, counted and re-emitted with them, and has no
// Recipient or Template.
type DeadFilter struct {
	Module  string      // only this module's requests
	Channel string      // only requests of this channel
	Code    string      // only requests dead of this cause (Dead.Code), such as "provider.unavailable"
	Since   time.Time   // only requests that died at or after this time
	Until   time.Time   // only requests that died before this time
	IDs     []uuid.UUID // only these requests; nil means any, an empty list none
	// After, for ListDead, starts the page after this request: the last
	// one of the previous page. Nil starts at the first.
	After *Dead
	Limit int // ListDead only: at most this many; default relay.ListDeadLimitDefault
}

func (f *DeadFilter) relay() *relay.DeadFilter {
	if f == nil {
		return &relay.DeadFilter{}
	}
	rf := &relay.DeadFilter{Module: f.Module, Lane: f.Channel, Code: f.Code, Since: f.Since, Until: f.Until,
		IDs: f.IDs, Limit: f.Limit}
	if f.After != nil {
		rf.After = &f.After.DeadRecord
	}
	return rf
}

// Dead is a dead request, as an operator inspects it.
type Dead struct {
	relay.DeadRecord
	Channel   string
	Recipient string // personal data: mask it where it is shown
	Template  string
}

// ListDead returns a page of the dead requests f selects, oldest death
// first; pass the last of a page as f.After for the next.
func (c *Client) ListDead(ctx context.Context, f *DeadFilter) ([]Dead, error) {
	recs, err := c.ob.ListDead(ctx, c.db, f.relay())
	if err != nil {
		return nil, err
	}
	out := make([]Dead, len(recs))
	for i, r := range recs {
		out[i] = Dead{DeadRecord: r, Channel: r.Lane}
		if p, err := decode(r.Payload); err == nil {
			out[i].Recipient, out[i].Template = p.Recipient, p.Template
		}
	}
	return out, nil
}

// CountDead counts the dead requests f selects per group of by: the code
// of the reason they died of (relay.ByCode), their channel (relay.ByLane)
// or their module (relay.ByModule), the largest group first. f.After and
// f.Limit do not apply. It reads only the dead requests.
func (c *Client) CountDead(ctx context.Context, f *DeadFilter, by relay.GroupBy) ([]relay.DeadGroup, error) {
	return c.ob.CountDead(ctx, c.db, f.relay(), by)
}

// Throughput counts the records of module ("" for every module) processed
// (a request delivered or ended by a recipient rule, a provider's report
// applied) and dead in each of the last minutes (1 to
// relay.ThroughputMinutesMax), the oldest minute first, reading only the
// records settled in them.
func (c *Client) Throughput(ctx context.Context, module string, minutes int) ([]relay.Minute, error) {
	return c.ob.Throughput(ctx, c.db, module, minutes)
}

// Reemit hands the dead requests f selects back to their relays, once the
// cause is fixed: each keeps its id (so a provider still deduplicates it)
// and gets a fresh budget of attempts, so its delivery sees attempt 1
// again; its timeline keeps the life that ended. It returns how many it
// re-emitted. A nil filter re-emits every dead request.
func (c *Client) Reemit(ctx context.Context, f *DeadFilter) (int64, error) {
	return c.ob.Reemit(ctx, c.db, f.relay())
}

// Purge deletes delivered and cancelled requests settled more than
// olderThan ago, and returns how many. The relay purges on its own after
// its Retention; Purge is for an operator's one-off.
func (c *Client) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	return c.ob.Purge(ctx, c.db, olderThan)
}

// Stats counts the pending and dead requests of module ("" for every
// module) per channel (the relay's lane), how long the oldest due one has
// waited, and the dead ones per reason code: what an overview page, a
// gauge or "what is stuck?" needs, in one statement that reads only the
// pending and dead requests.
func (c *Client) Stats(ctx context.Context, module string) (relay.Stats, error) {
	return c.ob.Stats(ctx, c.db, module)
}
