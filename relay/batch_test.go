package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/relay"
)

// batchSink is a BatchSink whose HandleBatch is fn; Handle is not used.
type batchSink struct {
	fn func(ctx context.Context, b *relay.Batch)
}

func (s batchSink) Handle(context.Context, relay.Record) relay.Result { panic("not handed one by one") }

func (s batchSink) HandleBatch(ctx context.Context, b *relay.Batch) { s.fn(ctx, b) }

func TestBatchSink(t *testing.T) {
	t.Parallel()

	// The relay hands a batch sink whole batches, and results written with
	// SettleIn commit (or not) with the sink's own work.
	t.Run("SettleInCommitsWithTheSinksWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		var sizes []int
		sink := batchSink{func(ctx context.Context, batch *relay.Batch) {
			mu.Lock()
			sizes = append(sizes, batch.Len())
			mu.Unlock()
			tx, err := b.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			var idx []int
			var results []relay.Result
			for i := range batch.Len() {
				rec := batch.Record(i)
				// The sink's work: a row of its own, here an inbox claim.
				_, err := tx.ExecContext(ctx, `INSERT INTO "`+b.schema+`".inbox (consumer, event_id) VALUES ('work', $1)`, rec.ID)
				require.NoError(t, err)
				idx, results = append(idx, i), append(results, relay.DoneWith("ref-"+rec.ID.String()[:8]))
			}
			require.NoError(t, batch.SettleIn(ctx, tx, idx, results))
			if batch.Record(0).Unsure == 0 {
				// The first batch's commit fails: nothing of it stands.
				require.NoError(t, tx.Rollback())
				for _, i := range idx {
					batch.Answer(i, relay.Unsure(10*time.Millisecond, errors.New("commit lost")))
				}
				return
			}
			require.NoError(t, tx.Commit())
			batch.Committed(idx)
		}}
		cfg := b.config(t)
		cfg.BatchSize = 3
		ids := b.stage(t, 3)
		supervise(t, b.db, cfg, sink)
		b.eventually(t, "processed_at IS NOT NULL", 3, 10*time.Second)
		for _, id := range ids {
			st, err := b.ob.Status(t.Context(), b.db, id)
			require.NoError(t, err)
			require.Equal(t, "ref-"+id.String()[:8], st.Result)
			require.Equal(t, 1, st.Unsure, "the rolled-back settle left the record pending, answered unsure")
		}
		var work int
		require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT count(*) FROM "`+b.schema+`".inbox WHERE consumer = 'work'`).Scan(&work))
		require.Equal(t, 3, work, "the work of the committed batch only")
		// The first batch is handed whole. Its records come due again one
		// by one (each answer's delay counts from its own settle), so a
		// loaded machine may hand them back in more than one batch.
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 3, sizes[0], "the first batch whole: %v", sizes)
		handed := 0
		for _, n := range sizes {
			handed += n
		}
		require.Equal(t, 6, handed, "each record handed twice: %v", sizes)
	})

	// A record whose outcome the sink wrote in its transaction leaves its
	// slot at once, so the lane's next batch is claimed and handed while
	// that transaction commits; its commit frees no slot a second time,
	// so the lane never has more than its limit in flight; and a batch's
	// slots come free together, so the next batch is whole.
	t.Run("SlotsComeFreeTogetherWhenTheOutcomesAreWritten", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		var sizes []int
		second := make(chan struct{})
		overlapped := make(chan bool, 1)
		sink := batchSink{func(ctx context.Context, batch *relay.Batch) {
			mu.Lock()
			sizes = append(sizes, batch.Len())
			n := len(sizes)
			mu.Unlock()
			if n == 2 {
				close(second)
			}
			tx, err := b.db.BeginTx(ctx, nil)
			if err != nil {
				return // unanswered: handed again after the lease, and the test fails on the sizes
			}
			defer func() { _ = tx.Rollback() }()
			idx, results := make([]int, batch.Len()), make([]relay.Result, batch.Len())
			for i := range idx {
				idx[i], results[i] = i, relay.Done()
			}
			if batch.SettleIn(ctx, tx, idx, results) != nil {
				return
			}
			if n == 1 {
				// Commit the first batch only once the second is handed,
				// or give up before the hand's deadline.
				select {
				case <-second:
					overlapped <- true
				case <-time.After(5 * time.Second):
					overlapped <- false
				}
			}
			if tx.Commit() == nil {
				batch.Committed(idx)
			}
		}}
		cfg := b.config(t)
		cfg.BatchSize, cfg.Concurrency, cfg.LaneLimit = 20, 20, 10
		// Room for the wait above on a loaded machine.
		cfg.HandTimeout, cfg.Lease = 10*time.Second, 20*time.Second
		b.stage(t, 40)
		supervise(t, b.db, cfg, sink)
		assert.True(t, testwait.RecvWithin(t, overlapped, 10*time.Second, "the first batch's wait for the second"),
			"the second batch was not handed while the first committed")
		b.eventually(t, "processed_at IS NOT NULL", 40, 10*time.Second)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []int{10, 10, 10, 10}, sizes, "every batch of the lane's room, whole and no more")
	})

	// A record the sink leaves without an answer, or whose HandleBatch
	// panics, is handed again after the lease, with a reason saying so.
	t.Run("NoAnswerAndPanicAreRetriedAfterTheLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		calls := 0
		sink := batchSink{func(ctx context.Context, batch *relay.Batch) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			switch n {
			case 1:
				return // no answer
			case 2:
				panic("boom")
			}
			for i := range batch.Len() {
				batch.Answer(i, relay.Done())
			}
		}}
		cfg := b.config(t)
		cfg.HandTimeout, cfg.Lease = 100*time.Millisecond, 300*time.Millisecond
		id := b.stage(t, 1)[0]
		supervise(t, b.db, cfg, sink)
		b.eventually(t, "processed_at IS NOT NULL AND hands = 3 AND attempts = 2", 1, 10*time.Second)
		st, err := b.ob.Status(t.Context(), b.db, id)
		require.NoError(t, err)
		require.Equal(t, "sink panicked: boom", st.LastError)
		var codes []string
		for _, e := range st.Timeline {
			if e.Event == "retry" {
				codes = append(codes, e.Code)
			}
		}
		require.Equal(t, []string{relay.CodeNoAnswer, relay.CodePanic}, codes, "each an attempt, with its code")
	})

	// The MaxUnsure-th Unsure answered through a batch is dead, as for a
	// record sink.
	t.Run("UnsureIsBoundedByMaxUnsure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sink := batchSink{func(ctx context.Context, batch *relay.Batch) {
			for i := range batch.Len() {
				batch.Answer(i, relay.Unsure(0, errors.New("commit failed")))
			}
		}}
		cfg := b.config(t)
		cfg.MaxUnsure = 2
		id := b.stage(t, 1)[0]
		supervise(t, b.db, cfg, sink)
		b.eventually(t, "failed_at IS NOT NULL", 1, 10*time.Second)
		st, err := b.ob.Status(t.Context(), b.db, id)
		require.NoError(t, err)
		require.Equal(t, "the sink could not commit its work 2 times (MaxUnsure); last: commit failed", st.Reason)
	})
}
