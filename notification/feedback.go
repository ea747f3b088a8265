package notification

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

// The records of providers' reports ride the relay of the module that
// sent the messages, in a lane of their own.
const (
	// KindReport is the record kind of one provider's report (a
	// feedback.Report as JSON), staged by the FeedbackStore with the id
	// ReportID and applied once by the Dispatcher.
	KindReport = "notification.report"
	// KindReceipts is the record kind of the follow-up a delivery on a
	// channel with Receipts stages in its claim's transaction: the
	// provider's references of what it delivered, due Receipts.After
	// later.
	KindReceipts = "notification.receipts"
	// LaneFeedback is the lane of both kinds: apart from every channel's,
	// so reports never wait behind a busy channel, nor hold one's room.
	LaneFeedback = "feedback"
)

// Codes of what became of report and receipts records.
const (
	CodeReportApplied   = "feedback.applied"           // the report's effects committed (now, or at an earlier hand)
	CodeReceiptsFetched = "feedback.receipts"          // the receipts were fetched and their reports staged
	CodeReceiptsPending = "feedback.receipts_pending"  // some receipts were not ready: asked again After later
	CodeReceiptsFailed  = "feedback.receipts_failed"   // the provider refused the request for receipts
	CodeNoReceipts      = "feedback.receipts_unneeded" // no Receipts are configured for the channel any more
)

// reportNamespace is the UUIDv5 namespace of ReportID.
var reportNamespace = uuid.MustParse("6b1f3c2e-5d0a-4f7e-9a41-2c8e7d5b9f10")

// ReportID is the id of the record of report r: a UUIDv5 of its provider
// and event id, so the same report posted twice (a provider's retry, a
// replay within the signature's tolerance) is the same record, staged
// once, and the same inbox claim, applied once.
func ReportID(r feedback.Report) uuid.UUID {
	return uuid.NewSHA1(reportNamespace, []byte(r.Provider+"\x00"+r.EventID))
}

// ReceiptFetcher fetches the reports a provider keeps about messages it
// accepted, by the references its deliveries answered (Expo's push
// receipts, by ticket id): *feedback.Expo is one. A reference without a
// report yet has none in the result. On an error it returns the reports
// it got before it; feedback.Retryable tells an error worth trying again.
// A panic is recovered, logged and tried again as such an error is.
type ReceiptFetcher interface {
	Receipts(ctx context.Context, references []string) ([]feedback.Report, error)
}

// Receipts configures the receipts of one channel (Config.Receipts). When
// a request of the channel is delivered with a reference, the claim's
// transaction stages a record of KindReceipts due After later; the
// dispatcher then fetches the receipts of the references due together in
// one call and stages each as a report, applied as a webhook's report is.
// A reference whose receipt is not ready is asked for again After later,
// until Keep after the delivery. A fetch that fails for a while (a 429, a
// 5xx, a timeout) is tried again as Config.Policy says, and no sooner
// than the provider's Retry-After; once the Policy's attempts are spent,
// the record is dead with the provider's reason.
type Receipts struct {
	// Fetcher fetches the receipts. Required.
	Fetcher ReceiptFetcher
	// After is how long after a delivery its receipts are fetched.
	// Default ReceiptsAfterDefault (15 minutes).
	After time.Duration
	// Keep is how long the provider keeps receipts; it must exceed After.
	// Default ReceiptsKeepDefault (24 hours).
	Keep time.Duration
}

// FeedbackStore returns the feedback.Store to hand to the receivers of
// package feedback (feedback.NewResend, NewSES, ...) and to stage what
// feedback.Expo fetched. Each call stages its reports as records of
// KindReport for module's relay in one transaction, each with the id
// ReportID, and returns once that committed: a receiver answers the
// provider 2xx only then, and 5xx when it failed, so the provider sends
// the report again. A report the outbox holds already is staged once.
//
// The Dispatcher that module's relay runs applies each report once; see
// Dispatcher.HandleBatch. The store is safe for concurrent use.
func (c *Client) FeedbackStore(module string) (feedback.Store, error) {
	if err := ident.Check("module", module); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return feedback.StoreFunc(func(ctx context.Context, reports []feedback.Report) error {
		tx, err := c.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("notification: stage reports: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		if err := stageReports(ctx, c.ob, tx, module, reports); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("notification: stage reports: commit: %w", err)
		}
		return nil
	}), nil
}

// stageReports stages reports for module inside tx, each once: a batch
// of a provider's events may name one twice.
func stageReports(ctx context.Context, ob *relay.Outbox, tx dbtx.Execer, module string, reports []feedback.Report) error {
	msgs := make([]relay.Message, 0, len(reports))
	seen := map[uuid.UUID]bool{}
	for i, r := range reports {
		if r.Provider == "" || r.EventID == "" || !r.Class.Valid() || ident.Check("Channel", r.Channel) != nil {
			return fmt.Errorf("notification: stage reports: reports[%d] lacks a provider, an event id, a class or a channel", i)
		}
		id := ReportID(r)
		if seen[id] {
			continue
		}
		seen[id] = true
		body, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("notification: stage reports: reports[%d]: %w", i, err)
		}
		msgs = append(msgs, relay.Message{ID: id, Module: module, Kind: KindReport, Lane: LaneFeedback, Payload: body})
	}
	if _, err := ob.StageBatch(ctx, tx, msgs); err != nil {
		return fmt.Errorf("notification: stage reports: %w", err)
	}
	return nil
}

// receiptsPayload is the payload of a KindReceipts record: the
// references delivered, and the address each went to (the recipient as
// its channel's Resolver gave it), since a receipt names only the
// reference.
type receiptsPayload struct {
	Channel    string   `json:"channel"`
	References []string `json:"references"`
	Addresses  []string `json:"addresses"`
}

// stageReceipts stages, inside tx, the follow-up that fetches the
// receipts of the jobs delivered with a reference on a channel with
// Receipts. jobs are of one channel; delivered tells which were.
func (d *Dispatcher) stageReceipts(ctx context.Context, bind *binding, tx dbtx.Execer, jobs []job, outs []delivery.Outcome, delivered []bool) error {
	rc, ok := d.cfg.Receipts[jobs[0].ch.name]
	if !ok {
		return nil
	}
	p := receiptsPayload{Channel: jobs[0].ch.name}
	for k, j := range jobs {
		if delivered[k] && outs[k].Reference() != "" {
			p.References = append(p.References, outs[k].Reference())
			p.Addresses = append(p.Addresses, feedback.NormalizeAddress(p.Channel, j.p.Recipient))
		}
	}
	if len(p.References) == 0 {
		return nil
	}
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("stage the receipts' follow-up: %w", err)
	}
	// A relay that computed its sleep before this commit does not know
	// the record: it finds it at its next wake-up or sweep. That is soon
	// enough for receipts due after a sweep (the default After is 15
	// minutes), which stage without a NOTIFY; receipts due sooner wake
	// the relay at commit, so that it sleeps until they are due.
	ob := bind.outbox.WithoutWakeUp()
	if rc.After < relay.SweepIntervalDefault {
		ob = bind.outbox
	}
	if _, err := ob.Stage(ctx, tx, relay.Message{Module: jobs[0].rec.Module, Kind: KindReceipts,
		Lane: LaneFeedback, Payload: body, NotBefore: time.Now().Add(rc.After)}); err != nil {
		return fmt.Errorf("stage the receipts' follow-up: %w", err)
	}
	return nil
}

// receiptsRetry is the answer for receipts record rec whose fetch failed
// with err, worth trying again: later, as the Policy says and no sooner
// than the provider asked, or dead with err once the Policy's attempts
// are spent.
func (d *Dispatcher) receiptsRetry(rec relay.Record, err error) relay.Result {
	attempt := rec.Attempts + 1
	if d.cfg.Policy.Exhausted(attempt) {
		return relay.Dead(fmt.Errorf("exhausted after %d attempts: %w", attempt, err)).WithCode(CodeReceiptsFailed)
	}
	delay := d.cfg.Policy.Delay(attempt)
	if xe, ok := errors.AsType[*feedback.ExpoError](err); ok {
		delay = max(delay, xe.RetryAfter)
	}
	return relay.Retry(delay, err).WithCode(CodeReceiptsFailed)
}

// fetch asks f for the receipts of refs, turning a panic into an error
// that is tried again as a provider's failure is: a fetcher's bug must not
// take the process down, with every delivery in it, at each hand.
func (d *Dispatcher) fetch(ctx context.Context, channel string, f ReceiptFetcher, refs []string) (reports []feedback.Report, err error) {
	defer func() {
		if r := recover(); r != nil {
			d.log.ErrorContext(ctx, "receipt fetcher panicked", "channel", channel, "panic", r)
			reports, err = nil, fetcherPanic{channel: channel, value: r}
		}
	}()
	return f.Receipts(ctx, refs)
}

// fetcherPanic is the error of a ReceiptFetcher that panicked.
type fetcherPanic struct {
	channel string
	value   any
}

func (e fetcherPanic) Error() string {
	return fmt.Sprintf("receipt fetcher for channel %q panicked: %v", e.channel, e.value)
}

// Retryable says that fetching again may succeed: once the bug is fixed.
func (fetcherPanic) Retryable() bool { return true }

// fetchReceipts handles the receipts records idx of b: per channel, one
// fetch for all their references, then one transaction that stages the
// reports and settles the records.
func (d *Dispatcher) fetchReceipts(ctx context.Context, bind *binding, b *relay.Batch, idx []int) {
	byChannel := map[string][]int{}
	payloads := map[int]receiptsPayload{}
	for _, i := range idx {
		var p receiptsPayload
		if err := json.Unmarshal(b.Record(i).Payload, &p); err != nil || p.Channel == "" {
			b.Answer(i, relay.Dead(errors.New("undecodable receipts record")).WithCode(CodeUndecodable))
			continue
		}
		if _, ok := d.cfg.Receipts[p.Channel]; !ok {
			b.Answer(i, relay.Done().WithCode(CodeNoReceipts))
			continue
		}
		payloads[i] = p
		byChannel[p.Channel] = append(byChannel[p.Channel], i)
	}
	for channel, idx := range byChannel {
		rc := d.cfg.Receipts[channel]
		var refs []string
		addresses := map[string]string{} // reference -> the address it went to
		for _, i := range idx {
			p := payloads[i]
			refs = append(refs, p.References...)
			for n, ref := range p.References {
				if n < len(p.Addresses) {
					addresses[ref] = p.Addresses[n]
				}
			}
		}
		fetchCtx, cancel := context.WithTimeout(ctx, bind.timeout)
		reports, err := d.fetch(fetchCtx, channel, rc.Fetcher, refs)
		cancel()
		reported := map[string]bool{}
		for n, r := range reports {
			reported[r.MessageID] = true
			if r.Address == "" {
				reports[n].Address = addresses[r.MessageID]
			}
		}
		results := make([]relay.Result, len(idx))
		for k, i := range idx {
			rec := b.Record(i)
			var missing int
			for _, ref := range payloads[i].References {
				if !reported[ref] {
					missing++
				}
			}
			detail := map[string]any{"references": len(payloads[i].References), "missing": missing}
			switch {
			case err != nil && errors.Is(ctx.Err(), context.Canceled):
				// The relay is shutting down: no fault of the provider's,
				// and fetching again changes nothing at the provider.
				results[k] = relay.Later(0).WithCode(CodeReceiptsFailed)
			case err != nil && feedback.Retryable(err):
				results[k] = d.receiptsRetry(rec, err)
			case err != nil:
				results[k] = relay.Dead(err).WithCode(CodeReceiptsFailed)
			case missing > 0 && rec.Waited() < rc.Keep:
				results[k] = relay.Later(rc.After).WithCode(CodeReceiptsPending).WithDetail(detail)
			default:
				results[k] = relay.Done().WithCode(CodeReceiptsFetched).WithDetail(detail)
			}
		}
		if err := d.inTx(ctx, bind, func(ctx context.Context, tx *sql.Tx) error {
			if len(reports) > 0 {
				if err := stageReports(ctx, bind.outbox, tx, b.Record(idx[0]).Module, reports); err != nil {
					return err
				}
			}
			return b.SettleIn(ctx, tx, idx, results)
		}); err != nil {
			for _, i := range idx {
				b.Answer(i, d.unsureOf(b.Record(i), err))
			}
			continue
		}
		b.Committed(idx)
	}
}
