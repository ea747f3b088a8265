package notification

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/purge"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

// Codes of the dispatcher's own answers (relay.Result.WithCode), beside
// those of the delivery package (delivery.CodeRejected, ...) and the
// relay's (relay.CodeMaxHands, ...).
const (
	CodeDelivered      = "delivered"           // the provider accepted it
	CodeIgnored        = "ignored"             // a record of another kind than Kind
	CodeUndecodable    = "payload.undecodable" // the staged payload does not decode
	CodeUnknownChannel = "channel.unknown"     // no delivery is registered for its channel
	CodeNotPrepared    = "dispatcher.unprepared"
	CodeClaimFailed    = "claim.failed" // the claim's own transaction failed (Unsure)
)

// ErrNotPrepared is why a Dispatcher that no relay prepared answers every
// request dead: run it with relay.Supervise, and have a sink that wraps
// it pass Prepare (and HandleBatch) on.
var ErrNotPrepared = errors.New("notification: the dispatcher was never prepared by a relay (a sink that wraps it must pass Prepare on)")

// Dispatcher is the relay sink that delivers notification requests. It
// takes each claimed batch whole (relay.BatchSink): it routes every
// request to its channel's delivery and, per channel, claims the requests
// in the inbox in one statement, delivers them, and writes their outcomes
// in the same transaction, which commits only what was delivered; a
// channel whose deliveries must not share commits gets a transaction per
// request (see Commit). It is safe for concurrent use; run it with
// relay.Supervise, which tells it the pool, the schema and the relay's
// limits (Prepare).
type Dispatcher struct {
	cfg      Config
	channels map[string]channel
	log      *slog.Logger
	tel      telemetry
	quiet    quietCache

	mu    sync.Mutex
	bound *binding // set by the first Prepare
}

// channel is a registered channel and how its claims commit.
type channel struct {
	name   string
	dl     delivery.Delivery
	shared bool // its requests of one batch share a transaction
	inTx   bool // the delivery writes through the claim's transaction
}

// binding is what the relays that run the dispatcher told it.
type binding struct {
	db      *sql.DB
	schema  string
	inbox   *inbox.Inbox
	outbox  *relay.Outbox
	policy  policyQueries
	timeout time.Duration // the DeliveryTimeout in effect
	pipe    dbtx.Pipeline // the first relay's Config.Pipeline
}

var (
	_ relay.LaneSharer = (*Dispatcher)(nil)
	_ relay.Preparer   = (*Dispatcher)(nil)
	_ relay.Purger     = (*Dispatcher)(nil)
)

// NewDispatcher returns a dispatcher that delivers through cfg.Deliveries.
// It checks cfg and starts nothing.
func NewDispatcher(cfg *Config) (*Dispatcher, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	tel, err := newTelemetry(c)
	if err != nil {
		return nil, err
	}
	channels := make(map[string]channel, len(c.Deliveries))
	for name, dl := range c.Deliveries {
		repeats := delivery.RepeatsOf(dl)
		mode := c.Commit[name]
		if mode == CommitAuto {
			mode = CommitEach
			if repeats != delivery.RepeatSends {
				mode = CommitShared
			}
		}
		channels[name] = channel{name: name, dl: dl, shared: mode == CommitShared, inTx: repeats == delivery.RepeatImpossible}
	}
	return &Dispatcher{
		cfg:      c,
		channels: channels,
		log:      c.Logger.With("component", "notification", "consumer", c.Consumer),
		tel:      tel,
	}, nil
}

// SharedLanes names the lanes whose records of one batch the dispatcher
// holds one connection for: the channels whose requests share a commit
// (Config.Commit), and LaneFeedback, whose reports and receipts it
// applies one transaction at a time. relay.Supervise asks it at start.
func (d *Dispatcher) SharedLanes() []string {
	lanes := []string{LaneFeedback}
	for name, ch := range d.channels {
		if ch.shared {
			lanes = append(lanes, name)
		}
	}
	return lanes
}

// Prepare binds the dispatcher to the pool and schema of the relay that
// runs it, checks its Config against the relay's, and derives the delivery
// timeout from the relay's HandTimeout unless Config.DeliveryTimeout is
// set. relay.Supervise calls it before it starts; the error names both
// settings that disagree. A dispatcher serves relays of one pool and one
// schema; with several relays (modules), it keeps the shortest delivery
// timeout.
func (d *Dispatcher) Prepare(ctx context.Context, db *sql.DB, rc relay.Config) error {
	if db == nil {
		return fmt.Errorf("%w: the relay's pool is nil", ErrConfig)
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
	// InboxRetention <= Lease + span, which cannot overflow so.
	if span := d.cfg.Policy.Span(); d.cfg.InboxRetention-rc.Lease <= span {
		return fmt.Errorf("%w: InboxRetention (%s) must exceed the relay's Config.Lease (%s) plus Policy's longest retry schedule (%s): "+
			"a claim purged before its request's last redelivery lets it be delivered twice",
			ErrConfig, d.cfg.InboxRetention, rc.Lease, span)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.bound; b != nil {
		switch {
		case b.schema != rc.Schema:
			return fmt.Errorf("%w: a relay of Config.Schema %q runs a dispatcher already serving schema %q: give each schema a dispatcher",
				ErrConfig, rc.Schema, b.schema)
		case b.db != db:
			return fmt.Errorf("%w: a relay runs a dispatcher already serving another pool: give each pool a dispatcher", ErrConfig)
		}
		b.timeout = min(b.timeout, timeout)
		return nil
	}
	ib, err := inbox.New(rc.Schema)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ob, err := relay.NewOutbox(&relay.OutboxConfig{Schema: rc.Schema, TracerProvider: d.cfg.TracerProvider})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if rc.Pipeline != nil {
		if err := checkPipeline(ctx, db, rc.Pipeline); err != nil {
			return fmt.Errorf("%w: the relay's Config.Pipeline fails on its pool: %w", ErrConfig, err)
		}
	}
	d.bound = &binding{db: db, schema: rc.Schema, inbox: ib, outbox: ob, policy: newPolicyQueries(rc.Schema), timeout: timeout,
		pipe: rc.Pipeline}
	return nil
}

// binding returns what Prepare bound, or nil before it ran.
func (d *Dispatcher) binding() *binding {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bound == nil {
		return nil
	}
	b := *d.bound
	return &b
}

// Handle delivers one record, as a batch of one: for a relay that hands
// records one by one, and for tests. A record of another kind than Kind is
// accepted and ignored.
func (d *Dispatcher) Handle(ctx context.Context, rec relay.Record) relay.Result {
	b := relay.NewBatch(rec)
	d.HandleBatch(ctx, b)
	return b.Result(0)
}

// job is one request of a batch on its way through the dispatcher.
type job struct {
	i   int // its index in the batch
	rec relay.Record
	req payload
	ch  channel
	p   delivery.Pending
	// skew is the database's clock minus this process's, as the rules
	// read found it: times are the database's (DESIGN.md). skewKnown says
	// the read happened; before it (a Resolver's failure) no expiry is
	// judged, and the next hand judges it on the database's clock.
	skew      time.Duration
	skewKnown bool
	// unresolved says why the request's channel's Resolver gave no
	// address for its recipient that it can go to; nil when it did, or
	// when the channel has no Resolver.
	unresolved error
}

// HandleBatch delivers a claimed batch: the relay calls it. Records of
// another kind than Kind, KindReport and KindReceipts are done at once;
// undecodable requests and requests for a channel without a delivery are
// dead with a reason that says so. The requests of each shared channel go
// through one transaction, every other request through one of its own,
// all at once. A request its delivery rejects with
// delivery.CodeRecipientGone is dead, and its address is suppressed
// (class permanent, reason recipient.gone) once the batch's transactions
// end, as a provider's report of it would have it; with
// delivery.CodeRecipientUnsubscribed, the same as the person's
// unsubscribe (class unsubscribe, which their resubscribe lifts).
//
// A provider's report (KindReport) is applied once, through the inbox,
// in one transaction with its effects:
//
//   - a permanent failure (a hard bounce, an unknown number, a push token
//     the device dropped), a complaint and an unsubscribe suppress the
//     address the report names (see Suppression), and end the module's
//     pending requests to it as suppressed: those a delivery holds are
//     waited for, and stay delivered if it commits;
//   - a transient failure is counted; TransientLimit of them within
//     TransientWindow suppress the address;
//   - a resubscribe (an SMS START) lifts the address's suppressions of
//     class unsubscribe;
//   - a problem on our side (content filtering, sender reputation,
//     credentials, payload size) never suppresses a person: it is logged
//     and counted (MetricFeedback);
//   - the requests the report is about, found by the provider's reference
//     their delivery returned, get a "feedback" entry on their timelines.
//
// Only the address that failed is concerned: a report that cannot tell
// which recipient failed names none (package feedback), and a push
// receipt that names only the ticket concerns the token of the request
// the ticket was for. A report without an address changes nothing but
// the timelines.
func (d *Dispatcher) HandleBatch(ctx context.Context, b *relay.Batch) {
	bind := d.binding()
	jobs := make([]job, 0, b.Len())
	var reports, receipts []int
	for i := range b.Len() {
		rec := b.Record(i)
		known := rec.Kind == Kind || rec.Kind == KindReport || rec.Kind == KindReceipts
		switch {
		case !known:
			b.Answer(i, relay.Done().WithCode(CodeIgnored))
			continue
		case bind == nil:
			b.Answer(i, relay.Dead(ErrNotPrepared).WithCode(CodeNotPrepared))
			continue
		case rec.Kind == KindReport:
			reports = append(reports, i)
			continue
		case rec.Kind == KindReceipts:
			receipts = append(receipts, i)
			continue
		}
		req, err := decode(rec.Payload)
		if err != nil {
			b.Answer(i, relay.Dead(fmt.Errorf("undecodable notification request: %w", err)).WithCode(CodeUndecodable))
			continue
		}
		ch, ok := d.channels[req.Channel]
		if !ok {
			b.Answer(i, relay.Dead(fmt.Errorf("no delivery is registered for channel %q", req.Channel)).WithCode(CodeUnknownChannel))
			continue
		}
		j := job{i: i, rec: rec, req: req, ch: ch, p: delivery.Pending{
			ID:            rec.ID,
			Channel:       req.Channel,
			Recipient:     req.Recipient,
			Template:      req.Template,
			Data:          req.Data,
			Category:      req.Category,
			CorrelationID: rec.CorrelationID,
			CausationID:   rec.CausationID,
			Attempt:       rec.Attempts + 1,
			StagedAt:      rec.CreatedAt,
		}}
		if rec.Secret != nil {
			if err := json.Unmarshal(rec.Secret, &j.p.Secrets); err != nil {
				b.Answer(i, relay.Dead(errors.New("the request's secrets do not decode")).WithCode(CodeUndecodable))
				continue
			}
		}
		jobs = append(jobs, j)
	}
	// The requests of a channel with a Resolver wait for its lookup, and
	// only they: a slow directory slows its own channel's deliveries.
	var wg sync.WaitGroup
	var refused refusedAddresses
	ready, lookups := d.byResolver(jobs)
	wg.Go(func() { d.deliverJobs(ctx, bind, b, ready, &refused) })
	for channel, jobs := range lookups {
		wg.Go(func() { d.deliverJobs(ctx, bind, b, d.resolve(ctx, bind, b, channel, jobs), &refused) })
	}
	if len(reports) > 0 || len(receipts) > 0 {
		// The feedback lane holds one connection per batch (SharedLanes):
		// its reports, then its receipts, one transaction at a time.
		wg.Go(func() {
			d.applyReports(ctx, bind, b, reports)
			d.fetchReceipts(ctx, bind, b, receipts)
		})
	}
	wg.Wait()
	d.suppressRefused(ctx, bind, refused.list)
}

// deliverJobs delivers jobs, all ready to be (their addresses resolved):
// the requests of each shared channel in one transaction, every other
// request in one of its own, all at once.
func (d *Dispatcher) deliverJobs(ctx context.Context, bind *binding, b *relay.Batch, jobs []job, refused *refusedAddresses) {
	// A shared channel's jobs make one group, allocated at its size: a job
	// is large, and growing a group of hundreds by appending copied them
	// over and again. Any other job is a group of its own.
	sizes := map[string]int{}
	for _, j := range jobs {
		if j.ch.shared {
			sizes[j.ch.name]++
		}
	}
	var groups [][]job
	shared := map[string]int{} // channel -> its group
	for _, j := range jobs {
		if !j.ch.shared {
			groups = append(groups, []job{j})
			continue
		}
		g, ok := shared[j.ch.name]
		if !ok {
			g = len(groups)
			shared[j.ch.name] = g
			groups = append(groups, make([]job, 0, sizes[j.ch.name]))
		}
		groups[g] = append(groups[g], j)
	}
	// One transaction for all the jobs reads the rules in the statement
	// that claims its requests; more read them once first.
	var pre *rules
	if len(groups) > 1 {
		r, err := d.readRules(ctx, bind, jobs)
		if err != nil {
			d.unsure(b, jobs, err)
			return
		}
		pre = &r
	}
	var wg sync.WaitGroup
	for _, jobs := range groups {
		wg.Go(func() { d.deliverAll(ctx, bind, b, jobs, pre, refused) })
	}
	wg.Wait()
}

// refusedAddresses collects the suppressions of the addresses a
// delivery's answer refused for good in a batch's transactions (see
// suppressedBy).
type refusedAddresses struct {
	mu   sync.Mutex
	list []Suppression
}

func (g *refusedAddresses) add(s Suppression) {
	g.mu.Lock()
	g.list = append(g.list, s)
	g.mu.Unlock()
}

// suppressedBy is the class of suppression a delivery's Reject with a
// code makes: the provider said the address is gone for good (an app
// removed from the device, a webhook endpoint's 410, an unknown mailbox),
// or that the person unsubscribed there (an SMS STOP).
var suppressedBy = map[string]feedback.Class{
	delivery.CodeRecipientGone:         feedback.ClassPermanent,
	delivery.CodeRecipientUnsubscribed: feedback.ClassUnsubscribe,
}

// suppressRefused suppresses the addresses a provider refused for good
// (see suppressedBy), once the batch's transactions have ended and given
// back their connections, so that the next requests to them end
// suppressed without a call, as a provider's report of it would have
// them. A suppression that fails is
// logged: the request is dead with its reason either way, and the next
// answer of the same suppresses the address.
func (d *Dispatcher) suppressRefused(ctx context.Context, bind *binding, refused []Suppression) {
	if len(refused) == 0 {
		return
	}
	// The hand's context may have ended with its deliveries: the
	// suppression is owed all the same.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitSlack)
	defer cancel()
	for _, s := range refused {
		if err := bind.policy.insertSuppression(ctx, bind.db, s); err != nil {
			d.log.WarnContext(ctx, "could not suppress an address its provider refused for good", "channel", s.Channel,
				"outbox_id", s.Source, "err", err)
		}
	}
}

// readCommitted is the isolation of a transaction that claims, whatever
// the server's default: under read committed a claim that waited for
// another's commit sees it (and answers "already claimed") instead of
// failing to serialize.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// commitSlack is how long a transaction may outlive its deliveries'
// timeout, for the statements and the commit around them.
const commitSlack = 5 * time.Second

// deliverAll delivers jobs, all of one channel, in one transaction: it
// claims them in the inbox, with their recipient rules unless pre holds
// them, delivers the ones claimed for the first time that no rule ends or
// defers, releases the claims of those not delivered, writes every
// outcome and commits. The claims that committed are the deliveries that
// happened. The transaction of a request of a channel that does not share
// commits holds only its claim (and its dedup key, with the provider's
// reference), and leaves the outcome to the relay's settle.
func (d *Dispatcher) deliverAll(ctx context.Context, bind *binding, b *relay.Batch, jobs []job, pre *rules, refused *refusedAddresses) {
	// The transaction serves every job: it must not end with the hand's
	// context, only a little after the deliveries' deadline.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bind.timeout+commitSlack)
	defer cancel()
	tx, err := beginClaim(txCtx, bind.db, bind.pipe)
	if err != nil {
		d.unsure(b, jobs, fmt.Errorf("begin the claim's transaction: %w", err))
		return
	}
	defer tx.end()

	// In id order (a UUID's bytes sort as its text), as claimBatch
	// claims them.
	slices.SortFunc(jobs, func(a, b job) int { return bytes.Compare(a.p.ID[:], b.p.ID[:]) })
	first, keys, r, err := d.claim(txCtx, bind, tx, jobs, pre)
	if err != nil {
		d.unsure(b, jobs, err)
		return
	}
	stops := d.decide(r, jobs, first)
	if err := d.claimKeys(txCtx, bind, tx, jobs, first, keys, stops); err != nil {
		d.unsure(b, jobs, err)
		return
	}

	send := make([]bool, len(jobs))
	for k, j := range jobs {
		_, stopped := stops[k]
		send[k] = first[j.p.ID] && !stopped
	}
	outs := d.deliverClaimed(ctx, bind, tx, jobs, send)
	delivered := make([]bool, len(jobs))
	for k := range jobs {
		delivered[k] = send[k] && outs[k].Kind() == delivery.KindDelivered
	}
	idx := make([]int, len(jobs))
	results := make([]relay.Result, len(jobs))
	var release []uuid.UUID
	var failed []string // dedup keys this transaction took of requests not delivered
	for k, j := range jobs {
		idx[k] = j.i
		stop, stopped := stops[k]
		switch {
		case !first[j.p.ID]:
			// A committed claim: delivered before; its settle was lost.
			results[k] = relay.Done().WithCode(CodeDelivered)
		case stopped:
			// Not delivered, so it keeps no claim: handed again, its key
			// decides again. A lone request a rule stopped took its key
			// with its claim.
			results[k] = stop
			release = append(release, j.p.ID)
			if keys[j.req.DedupKey] {
				failed = append(failed, j.req.DedupKey)
			}
		case outs[k].Kind() == delivery.KindDelivered:
			results[k] = relay.DoneWith(outs[k].Reference()).WithCode(CodeDelivered)
		default:
			results[k] = d.failed(j, outs[k])
			code := delivery.CodeOf(outs[k].Reason())
			if class, ok := suppressedBy[code]; ok && outs[k].Kind() == delivery.KindReject {
				dst := destinationOf(&j)
				refused.add(Suppression{Channel: dst.channel, Address: dst.address, Class: class,
					Reason: code, Source: j.p.ID.String()})
			}
			release = append(release, j.p.ID)
			if j.req.DedupKey != "" {
				failed = append(failed, j.req.DedupKey)
			}
		}
	}
	notCommitted := func(err error) {
		// A delivered request may or may not have taken effect (Unsure);
		// the others' outcomes stand, settled by the relay instead.
		for k, j := range jobs {
			if first[j.p.ID] && outs[k].Kind() == delivery.KindDelivered {
				b.Answer(j.i, d.unsureOf(j.rec, fmt.Errorf("delivered, but the claim's commit failed: %w", err)))
				continue
			}
			b.Answer(j.i, results[k])
		}
	}
	// The writes that end the transaction go with its COMMIT, and their
	// errors with its.
	later := tx.later()
	if !jobs[0].ch.shared {
		// A transaction of its own commits a delivery's claim alone; the
		// relay's settle writes the outcome after the commit, in one
		// statement with other requests' outcomes. Writing it here cost
		// the server twice the CPU per request (docs/bench/HISTORY.md).
		// Anything else the rollback takes back, the claim with it. A
		// delivered request with a dedup key writes its reference with
		// the key, where its duplicates read it before the relay settles
		// its row.
		if len(release) == 0 && first[jobs[0].p.ID] {
			if j := jobs[0]; j.req.DedupKey != "" && delivered[0] {
				_, _ = later.ExecContext(txCtx, bind.policy.keyReference, d.cfg.Consumer, j.req.DedupKey, outs[0].Reference())
			}
			if err := d.stageReceipts(txCtx, bind, later, jobs, outs, delivered); err != nil {
				notCommitted(err)
				return
			}
			if err := tx.commit(txCtx); err != nil {
				notCommitted(err)
				return
			}
		}
		b.Answer(jobs[0].i, results[0])
		return
	}
	if len(release) > 0 {
		if err := bind.inbox.Release(txCtx, later, d.cfg.Consumer, release); err != nil {
			notCommitted(err)
			return
		}
	}
	if len(failed) > 0 {
		// A request that was not delivered holds no dedup key.
		_, _ = later.ExecContext(txCtx, bind.policy.releaseKeys, d.cfg.Consumer, pgarray.Of(failed))
	}
	if err := d.stageReceipts(txCtx, bind, later, jobs, outs, delivered); err != nil {
		notCommitted(err)
		return
	}
	if err := b.SettleIn(txCtx, later, idx, results); err != nil {
		notCommitted(err)
		return
	}
	if err := tx.commit(txCtx); err != nil {
		notCommitted(err)
		return
	}
	b.Committed(idx)
}

// claim claims jobs in the inbox inside tx, in one statement that also
// reads the recipient rules of their subjects and addresses unless pre
// holds them, and returns the jobs claimed for the first time and the
// rules. A lone job claims its dedup key in the same statement, and keys
// then holds the key if it was free (a nil keys means claimKeys has the
// keys to claim).
func (d *Dispatcher) claim(ctx context.Context, bind *binding, tx *claimTx, jobs []job, pre *rules) (first map[uuid.UUID]bool,
	keys map[string]bool, r rules, err error) {
	var ids any
	if len(jobs) > 1 {
		s := make([]string, len(jobs))
		for k, j := range jobs {
			s[k] = j.p.ID.String()
		}
		ids = pgarray.Of(s)
	}
	// The id as text, as inbox.Once sends it.
	one := []any{d.cfg.Consumer, jobs[0].p.ID.String(), jobs[0].req.DedupKey}
	var query string
	var args []any
	switch {
	case pre != nil && len(jobs) > 1:
		query, args = bind.policy.claimBatch, []any{d.cfg.Consumer, ids}
	case pre != nil && jobs[0].req.DedupKey == "":
		// A bare insert: claimOne's statement took about 6 % of the rate
		// of a drain that commits each request (docs/bench/HISTORY.md).
		query, args = bind.policy.claimAlone, one[:2]
	case pre != nil:
		query, args = bind.policy.claimOne, one
	case len(jobs) > 1:
		query, args = bind.policy.claimBatchRules, append(d.ruleArgs(jobs), d.cfg.Consumer, ids)
	default:
		query, args = bind.policy.claimOneRules, append(d.ruleArgs(jobs), one...)
	}
	err = tx.query(ctx, func(rows dbtx.Rows) error {
		first, keys, r, err = d.readClaim(ctx, rows)
		return err
	}, query, args...)
	if err != nil {
		return nil, nil, r, fmt.Errorf("claim in the inbox: %w", err)
	}
	if pre != nil {
		r = *pre
	}
	if len(jobs) > 1 {
		keys = nil
	}
	return first, keys, r, nil
}

// deliverClaimed calls the deliveries of the jobs to send (claimed for the
// first time, and no duplicate), all at once; those that write through the
// claim's transaction one after another, each in a savepoint of its own:
// the transaction commits the outcome of one that failed too, but not its
// writes.
func (d *Dispatcher) deliverClaimed(ctx context.Context, bind *binding, tx *claimTx, jobs []job, send []bool) []delivery.Outcome {
	ctx, cancel := context.WithTimeoutCause(ctx, bind.timeout, fmt.Errorf("DeliveryTimeout of %s passed", bind.timeout))
	defer cancel()
	outs := make([]delivery.Outcome, len(jobs))
	var apart []int // the jobs to send that do not write through tx
	for k := range jobs {
		switch {
		case !send[k]:
		case !jobs[k].ch.inTx:
			apart = append(apart, k)
		default:
			outs[k] = d.deliverInSavepoint(ctx, tx, &jobs[k])
		}
	}
	// Every delivery starts at once: a goroutine is started for each
	// until none is left to start, and each goroutine, once its delivery
	// has answered, starts the next one left. A goroutine's stack starts
	// small and grows by copying as a delivery's calls go deeper; one that
	// goes on to the next delivery keeps what it grew, so quick answers
	// share a few goroutines and slow ones each have their own.
	var next atomic.Int64
	deliver := func() {
		for n := next.Add(1) - 1; n < int64(len(apart)); n = next.Add(1) - 1 {
			k := apart[n]
			outs[k] = d.deliver(jobs[k].rec.Context(ctx), &jobs[k])
		}
	}
	var wg sync.WaitGroup
	for range apart {
		if next.Load() >= int64(len(apart)) {
			break
		}
		wg.Go(deliver)
	}
	wg.Wait()
	return outs
}

// deliverInSavepoint runs a delivery that writes through the shared
// transaction inside a savepoint, and takes back its writes unless it
// delivered.
func (d *Dispatcher) deliverInSavepoint(ctx context.Context, tx *claimTx, j *job) delivery.Outcome {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT delivery`); err != nil {
		return delivery.Retry(fmt.Errorf("savepoint: %w", err))
	}
	out := d.deliver(delivery.WithTx(j.rec.Context(ctx), tx), j)
	undo := `RELEASE SAVEPOINT delivery`
	if out.Kind() != delivery.KindDelivered {
		undo = `ROLLBACK TO SAVEPOINT delivery`
	}
	if _, err := tx.ExecContext(context.WithoutCancel(ctx), undo); err != nil && out.Kind() == delivery.KindDelivered {
		return delivery.Retry(fmt.Errorf("release the savepoint: %w", err))
	}
	return out
}

// failed maps an outcome other than delivered onto the relay's result:
// Reject is dead; Retry follows the policy, and is dead once the attempts
// are exhausted.
// The code of each is the reason's own (delivery.CodeOf), or else
// delivery.CodeRejected or delivery.CodeUnavailable.
func (d *Dispatcher) failed(j job, out delivery.Outcome) relay.Result {
	switch out.Kind() {
	case delivery.KindReject:
		return relay.Dead(out.Reason()).WithCode(cmp.Or(delivery.CodeOf(out.Reason()), delivery.CodeRejected))
	case delivery.KindRetry:
	default:
		out = delivery.Retry(fmt.Errorf("delivery for channel %q answered %s, not an outcome", j.p.Channel, out))
	}
	code := cmp.Or(delivery.CodeOf(out.Reason()), delivery.CodeUnavailable)
	if d.cfg.Policy.Exhausted(j.p.Attempt) {
		return relay.Dead(fmt.Errorf("exhausted after %d attempts: %w", j.p.Attempt, out.Reason())).WithCode(code)
	}
	delay := max(d.cfg.Policy.Delay(j.p.Attempt), out.After())
	if exp := j.req.ExpiresAt; exp != nil && j.skewKnown && !time.Now().Add(j.skew+delay).Before(*exp) {
		d.tel.decided(j.p.Channel, RuleExpiry)
		return expired(*exp, "expires before its next attempt")
	}
	return relay.Retry(delay, out.Reason()).WithCode(code)
}

// unsure answers every job for a failure of the claim's own transaction
// before any delivery, which is no fault of theirs.
func (d *Dispatcher) unsure(b *relay.Batch, jobs []job, err error) {
	for _, j := range jobs {
		b.Answer(j.i, d.unsureOf(j.rec, err))
	}
}

// unsureOf is the answer for a failure of rec's claim transaction: offered
// again without counting an attempt, backed off by the failures so far so
// that a flapping connection does not spend the relay's MaxUnsure in a
// minute.
func (d *Dispatcher) unsureOf(rec relay.Record, err error) relay.Result {
	d.log.Warn("claim's transaction failed; offering the record again", "outbox_id", rec.ID, "err", err)
	return relay.Unsure(d.cfg.Policy.Delay(rec.Unsure+1), err).WithCode(CodeClaimFailed)
}

// deliver calls the delivery, in a span of its own inside the staging
// write's trace, turning a panic or an overrun into a Retry that says so.
func (d *Dispatcher) deliver(ctx context.Context, j *job) (out delivery.Outcome) {
	ctx, span := d.tel.startSpan(ctx, &j.rec, &j.p)
	defer span.End()
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			d.log.ErrorContext(ctx, "delivery panicked", "outbox_id", j.p.ID, "channel", j.p.Channel, "panic", r)
			out = delivery.Retry(delivery.WithCode(delivery.CodePanic, fmt.Errorf("delivery for channel %q panicked: %v", j.p.Channel, r)))
		}
		if out.Kind() != delivery.KindDelivered && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Name the deadline that fired: the delivery's own, or the
			// relay's hand timeout when the claim took long.
			out = delivery.RetryAfter(delivery.WithCode(delivery.CodeTimeout, fmt.Errorf("delivery for channel %q timed out: %w: %v",
				j.p.Channel, context.Cause(ctx), cmp.Or[any](out.Reason(), "no answer"))), out.After())
		}
		d.tel.finished(ctx, span, j.p.Channel, out, time.Since(start))
	}()
	return j.ch.dl.Deliver(ctx, j.p)
}

// Purge deletes the dispatcher's inbox claims older than InboxRetention
// and its dedup keys older than DedupRetention (another Consumer's are
// left alone), and the transient failures of addresses last reported
// longer than TransientWindow ago.
// The relay supervisor calls it on each purge pass.
func (d *Dispatcher) Purge(ctx context.Context) (int64, error) {
	bind := d.binding()
	if bind == nil {
		return 0, ErrNotPrepared
	}
	n, err := bind.inbox.Purge(ctx, bind.db, d.cfg.Consumer, d.cfg.InboxRetention)
	if err != nil {
		return n, err
	}
	keys, err := purge.Batches(ctx, bind.db, bind.policy.purgeKeys, d.cfg.DedupRetention, inbox.PurgeBatchDefault, d.cfg.Consumer)
	if err != nil {
		return n + keys, fmt.Errorf("notification: purge dedup keys: %w", err)
	}
	// An address's transient failures older than the window count no
	// more.
	failures, err := purge.Batches(ctx, bind.db, bind.policy.purgeTransient, d.cfg.TransientWindow, inbox.PurgeBatchDefault)
	if err != nil {
		return n + keys + failures, fmt.Errorf("notification: purge transient failures: %w", err)
	}
	return n + keys + failures, nil
}
