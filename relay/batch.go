package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/validate"
)

// BatchSink is a Sink that takes each claimed batch whole: Supervise hands
// it every batch it claims (at most Config.BatchSize records, of any
// lanes) with one call of HandleBatch instead of one Handle per record.
// A batch sink can then do set-wise what a record sink does one by one,
// such as claiming the batch's records in one statement, and write the
// records' outcomes in its own transaction, so they commit with its work
// (Batch.SettleIn): one commit for a whole batch where its work allows.
//
// HandleBatch answers every record of b, through b.Answer or b.SettleIn,
// before it returns; a record left without an answer is retried after a
// lease, an attempt counted, with CodeNoAnswer (a crash, which answers
// nothing, spends a hand but no attempt). ctx carries the relay's
// deadline (HandTimeout, with ErrHandTimeout as its cause); the staging
// write's context of each record is its Record.Context. HandleBatch is
// called concurrently for different batches; it must return soon after
// ctx ends. A panic is recovered and answers the records not yet answered
// the same way, with CodePanic and the panic as the reason.
type BatchSink interface {
	Sink
	HandleBatch(ctx context.Context, b *Batch)
}

// A LaneSharer is a BatchSink that holds one database connection for all
// the records of some lanes in a batch, where it holds one per record of
// any other: the notification dispatcher commits the requests of a
// channel that shares commits in one transaction per batch. Config's
// Connections counts a shared lane's records in one batch as one
// connection, released once the last of them leaves its slot. A claim
// takes at most half of a shared lane's LaneLimit, so that two of its
// batches are in flight: while the sink delivers and commits one, it
// decodes, reads and claims the next, and the lane is never idle while a
// batch's statements run. Supervise asks for the lanes once, at start.
type LaneSharer interface {
	BatchSink
	SharedLanes() []string
}

// Batch is a claimed batch of records on its way through a BatchSink. Its
// methods are safe for concurrent use.
type Batch struct {
	recs []Record
	s    *supervisor // nil for a batch of NewBatch
	at   time.Time   // when it was handed

	mu      sync.Mutex
	answers []answer
	shared  map[string]int // records of each shared lane still in their slots
}

// newBatch is the batch of a claim's recs, handed by s.
func newBatch(s *supervisor, recs []Record) *Batch {
	b := &Batch{recs: recs, s: s, at: time.Now(), answers: make([]answer, len(recs)), shared: map[string]int{}}
	for _, rec := range recs {
		if s.shared[rec.Lane] {
			b.shared[rec.Lane]++
		}
	}
	return b
}

// leave counts record i out of its slot and returns its lane if that was
// the batch's last record of a shared lane, whose connection is then
// free. b.mu is held.
func (b *Batch) leave(i int) (ended []string) {
	lane := b.recs[i].Lane
	n, ok := b.shared[lane]
	if !ok {
		return nil
	}
	if b.shared[lane] = n - 1; n == 1 {
		return []string{lane}
	}
	return nil
}

// answer is where one record's result stands.
type answer struct {
	state answerState
	res   Result
}

type answerState uint8

const (
	unanswered answerState = iota
	written                // SettleIn wrote it inside the sink's transaction, not yet committed
	answered               // final: committed, or queued for the relay to settle
)

// NewBatch returns a batch of recs that no relay settles: a sink's
// answers are only kept, for Result. It serves a BatchSink's own Handle
// (a batch of one) and tests.
func NewBatch(recs ...Record) *Batch {
	return &Batch{recs: recs, at: time.Now(), answers: make([]answer, len(recs))}
}

// Len returns the number of records in b.
func (b *Batch) Len() int { return len(b.recs) }

// Record returns the i-th record of b.
func (b *Batch) Record(i int) Record { return b.recs[i] }

// Answer gives record i its result, which the relay settles in a
// statement of its own (batched with other answers). It is also how a
// sink answers a record whose SettleIn did not commit. A second Answer
// for a record that already has one is ignored.
func (b *Batch) Answer(i int, res Result) {
	b.mu.Lock()
	a := &b.answers[i]
	if a.state == answered {
		b.mu.Unlock()
		return
	}
	wasOpen := a.state == unanswered
	a.state, a.res = answered, b.final(i, res)
	res = a.res
	var ended []string
	if wasOpen {
		ended = b.leave(i)
	}
	b.mu.Unlock()
	if b.s != nil {
		b.s.answered(b.recs[i], res, time.Since(b.at), true)
		if wasOpen {
			b.s.release([]Record{b.recs[i]}, ended)
		}
	}
}

// SettleIn writes the results of the records idx inside tx, the sink's own
// transaction, fenced by their claims as every settle is: they take effect
// if and only if tx commits. Call Committed once tx committed; if it did
// not, Answer those records again (Unsure, typically). The error is the
// statement's: tx is then in error and must be rolled back. The records
// leave their slots of Concurrency and LaneLimit here, and their
// connections of Connections, not at the commit: their work is done, and
// the relay claims the next records while tx commits.
func (b *Batch) SettleIn(ctx context.Context, tx dbtx.Execer, idx []int, results []Result) error {
	if len(idx) != len(results) {
		return fmt.Errorf("relay: settle in a transaction: %d records but %d results", len(idx), len(results))
	}
	st := make([]settlement, 0, len(idx))
	var freed []Record
	var ended []string
	b.mu.Lock()
	for k, i := range idx {
		a := &b.answers[i]
		if a.state == answered {
			continue
		}
		if a.state == unanswered {
			freed = append(freed, b.recs[i])
			ended = append(ended, b.leave(i)...)
		}
		a.state, a.res = written, b.final(i, results[k])
		st = append(st, settlementOf(b.recs[i], a.res))
	}
	b.mu.Unlock()
	if b.s == nil || len(st) == 0 {
		return nil
	}
	// The sink's work on these records is done but for its commit: their
	// slots are free, so the next claim runs while this one commits.
	b.s.release(freed, ended)
	if _, err := tx.ExecContext(ctx, b.s.ob.q.settle, settleArgs(st)...); err != nil {
		return fmt.Errorf("relay: settle in a transaction: %w", err)
	}
	return nil
}

// Committed tells b that the transaction of an earlier SettleIn of the
// records idx committed: their results stand.
func (b *Batch) Committed(idx []int) {
	for _, i := range idx {
		b.mu.Lock()
		a := &b.answers[i]
		if a.state != written {
			b.mu.Unlock()
			continue
		}
		a.state = answered
		res := a.res
		b.mu.Unlock()
		if b.s != nil {
			b.s.answered(b.recs[i], res, time.Since(b.at), false)
		}
	}
}

// Result returns record i's result: its answer, or the zero Result while
// it has none that stands.
func (b *Batch) Result(i int) Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.answers[i]; a.state == answered {
		return a.res
	}
	return Result{}
}

// final is res as the relay settles it for record i: a zero Result is a
// retry after the lease, and the MaxUnsure-th Unsure is dead.
func (b *Batch) final(i int, res Result) Result {
	if b.s == nil {
		return res
	}
	return b.s.final(b.recs[i], res)
}

// finish answers every record still without an answer that stands, once
// HandleBatch returned: no answer at all, or a SettleIn whose commit was
// never confirmed (the fenced settle is then harmless if it did commit).
func (b *Batch) finish(code, why string) {
	for i := range b.recs {
		b.mu.Lock()
		open := b.answers[i].state != answered
		b.mu.Unlock()
		if open {
			b.Answer(i, Retry(b.s.cfg.Lease, errors.New(why)).WithCode(code))
		}
	}
}

// settleArgs are the settle statement's arguments for st.
func settleArgs(st []settlement) []any {
	n := len(st)
	ids, hands, attempts, outcomes := make([]string, n), make([]int64, n), make([]int64, n), make([]string, n)
	delays, texts, codes, took := make([]float64, n), make([]string, n), make([]string, n), make([]float64, n)
	details, claims := make([]string, n), make([]int64, n)
	for i, s := range st {
		ids[i], hands[i], attempts[i], outcomes[i] = s.id.String(), int64(s.hand), int64(s.attempts), s.res.outcome.String()
		text := validate.Storable(s.res.text)
		if s.res.outcome == outcomeDone {
			text = cut(text, ResultMaxLen)
		}
		delays[i], texts[i], codes[i], took[i] = s.res.delay.Seconds(), text, cut(validate.Storable(s.res.code), CodeMaxLen), s.took.Seconds()
		details[i], claims[i] = detailJSON(s.res.detail), s.claim
	}
	return []any{pgarray.Of(ids), pgarray.Of(hands), pgarray.Of(outcomes), pgarray.Of(delays), pgarray.Of(texts), pgarray.Of(attempts),
		pgarray.Of(codes), pgarray.Of(took), pgarray.Of(details), pgarray.Of(claims)}
}

// cut returns s cut at max bytes, at a character's boundary.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}

// detailJSON is a Result's detail as the settle statement takes it: "{}"
// for none, and a note instead of a detail that does not encode, or that
// jsonb cannot store: the settle of every record with it would fail.
func detailJSON(detail map[string]any) string {
	if len(detail) == 0 {
		return "{}"
	}
	b, err := json.Marshal(detail)
	if err != nil || !validate.JSONStorable(b) {
		return `{"detail":"does not encode as JSON"}`
	}
	return string(b)
}

// settlement is one record's answer, on its way to the database. The claim
// it answers, and the hand and the attempts it was claimed with, fence it:
// a settle lands at most once per claim, and never over what a later claim
// decided.
type settlement struct {
	id       uuid.UUID
	claim    int64
	hand     int
	attempts int
	res      Result
	took     time.Duration // from the claim to the answer
}

func settlementOf(rec Record, res Result) settlement {
	var took time.Duration
	if !rec.claimedAt.IsZero() {
		took = time.Since(rec.claimedAt)
	}
	return settlement{id: rec.ID, claim: rec.claim, hand: rec.Hand, attempts: rec.Attempts, res: res, took: took}
}
