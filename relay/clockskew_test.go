package relay_test

// The application's clock set ten minutes off the database's. Go reads
// the system clock without libc, so the skew is made on the other side:
// the test's own cluster runs with its clock ten minutes ahead of this
// process's, or ten minutes behind (pgtemp's ClockOffset, libfaketime).
// Every due time is the database's now() plus a duration, so neither
// direction hands a record early or leaves one stuck for ten minutes.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/relay"
)

// Kinds of the clock-skew test: what its sink does with a record.
const (
	skewPrompt    = "prompt"    // done at once
	skewRetry     = "retry"     // retry after skewRetryDelay, then done
	skewOverrun   = "overrun"   // the first hand outlives its lease
	skewScheduled = "scheduled" // staged to be due skewScheduleIn later
)

const (
	skewRetryDelay = 2 * time.Second
	skewScheduleIn = 2 * time.Second
	// skewLate bounds how late a record may be handed after it fell due,
	// on a loaded machine: far below the ten minutes of skew.
	skewLate = 10 * time.Second
)

// skewHand is what the sink saw of one hand, on both clocks.
type skewHand struct {
	goStart, goReturn time.Time     // this process's clock (monotonic readings)
	dbStart, dbReturn time.Time     // the database's clock_timestamp()
	due               time.Time     // the row's available_at during the hand: its lease's end
	waited            time.Duration // Record.Waited at the start
}

// One relay per direction of skew, with a record of each kind: prompt
// records are handed once and processed within seconds, and Record.Waited
// is not off by the skew; a retry is handed again after its delay, not
// before; a hand that outlives its lease is handed again once the lease
// ends, not before; a record scheduled on the database's clock is handed
// when due. "Not ten minutes later" is a bound of skewLate throughout.
func TestFaultClockSkew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		offset time.Duration // the database's clock minus the application's
	}{
		{"DatabaseTenMinutesAhead", 10 * time.Minute},
		{"DatabaseTenMinutesBehind", -10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, _ := ownCluster(t, &pgtemp.Options{ClockOffset: tc.offset})
			before := time.Now()
			dbNow := b.clock(t)
			after := time.Now()
			require.WithinRange(t, dbNow, before.Add(tc.offset-time.Second), after.Add(tc.offset+time.Second),
				"the database's clock is %s off the application's", tc.offset)

			cfg := b.config(t) // listens on the cluster; sweeps every hour
			// Room for the sink's own queries on a loaded machine: a hand
			// of a prompt record that timed out was handed twice.
			cfg.HandTimeout = 3 * time.Second
			cfg.Lease = 5 * time.Second

			var (
				mu    sync.Mutex
				hands = map[uuid.UUID][]skewHand{} // by hand, from the first
			)
			release := make(chan struct{})
			releaseOnce := sync.OnceFunc(func() { close(release) })
			sink := newRecorder(func(ctx context.Context, rec relay.Record) relay.Result {
				h := skewHand{goStart: time.Now(), waited: rec.Waited()}
				if err := b.db.QueryRowContext(ctx, `SELECT clock_timestamp(), available_at FROM "`+b.schema+`".outbox WHERE id = $1`,
					rec.ID).Scan(&h.dbStart, &h.due); err != nil {
					t.Errorf("hand %d of %s: %v", rec.Hand, rec.Kind, err)
					return relay.Retry(0, err)
				}
				mu.Lock()
				hands[rec.ID] = append(hands[rec.ID], h)
				i := len(hands[rec.ID]) - 1
				mu.Unlock()
				res := relay.Done()
				switch {
				case rec.Kind == skewRetry && rec.Attempts == 0:
					res = relay.Retry(skewRetryDelay, errors.New("provider busy"))
				case rec.Kind == skewOverrun && rec.Hand == 1:
					<-release // ignores ctx: outlives the hand timeout and the lease
				case rec.Kind == skewOverrun:
					releaseOnce() // the second hand came: the first may end, fenced off
				}
				ret := h
				if err := b.db.QueryRowContext(context.WithoutCancel(ctx), `SELECT clock_timestamp()`).Scan(&ret.dbReturn); err != nil {
					t.Errorf("hand %d of %s: %v", rec.Hand, rec.Kind, err)
				}
				ret.goReturn = time.Now()
				mu.Lock()
				hands[rec.ID][i] = ret
				mu.Unlock()
				return res
			})

			early := b.stageKinds(t, nil, skewPrompt, skewPrompt, skewPrompt)
			supervise(t, b.db, cfg, sink)
			t.Cleanup(releaseOnce) // before the relay stops: it waits for its hands

			// A schedule is an instant on the database's clock.
			notBefore := b.clock(t).Add(skewScheduleIn)
			later := b.stageKinds(t, map[string]time.Time{skewScheduled: notBefore},
				skewPrompt, skewPrompt, skewPrompt, skewRetry, skewOverrun, skewScheduled)
			prompt := slices.Concat(early, later[:3])
			retry, overrun, scheduled := later[3], later[4], later[5]

			b.eventually(t, "processed_at IS NOT NULL", len(early)+len(later), cfg.Lease+2*skewLate)
			mu.Lock()
			defer mu.Unlock()

			// Nothing stuck: each prompt record handed once, at once.
			for _, id := range prompt {
				require.Equal(t, 1, sink.handsOf(id), "prompt record %s", id)
				require.GreaterOrEqual(t, hands[id][0].waited, time.Duration(0), "Waited is never negative")
				require.Less(t, hands[id][0].waited, skewLate, "Waited is not off by the skew")
			}
			var slowest float64
			require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT max(extract(epoch FROM processed_at - created_at))
				FROM "`+b.schema+`".outbox WHERE kind = $1`, skewPrompt).Scan(&slowest))
			require.Less(t, slowest, skewLate.Seconds(), "staging to processed, on the database's clock")

			// A retry: handed again after its delay, not before, and
			// not ten minutes later; on both clocks.
			require.Equal(t, 2, sink.handsOf(retry))
			first, second := hands[retry][0], hands[retry][1]
			require.GreaterOrEqual(t, second.dbStart.Sub(first.dbReturn), skewRetryDelay, "database's clock")
			require.GreaterOrEqual(t, second.goStart.Sub(first.goReturn), skewRetryDelay, "application's monotonic clock")
			require.Less(t, second.dbStart.Sub(first.dbReturn), skewRetryDelay+skewLate)
			require.Less(t, second.goStart.Sub(first.goReturn), skewRetryDelay+skewLate)
			t.Logf("retry: handed again %s after the answer", second.goStart.Sub(first.goReturn).Round(time.Millisecond))

			// A hand that outlives its lease: the lease is the claim's
			// now() plus Lease, and the record is handed again once it
			// ends, not before, and not ten minutes later.
			require.Equal(t, 2, sink.handsOf(overrun))
			first, second = hands[overrun][0], hands[overrun][1]
			require.LessOrEqual(t, first.due.Sub(first.dbStart), cfg.Lease, "the lease runs Lease from the claim")
			require.Positive(t, first.due.Sub(first.dbStart), "the lease had not ended when the hand began")
			require.False(t, second.dbStart.Before(first.due), "handed again at %s, before the lease ended at %s",
				second.dbStart, first.due)
			require.Less(t, second.dbStart.Sub(first.due), skewLate)
			require.Less(t, second.goStart.Sub(first.goStart), cfg.Lease+skewLate)
			t.Logf("overrun: handed again %s after the first hand began", second.goStart.Sub(first.goStart).Round(time.Millisecond))

			// A scheduled record: handed once it is due on the database's
			// clock, found by the relay's own timer (the sweep is hourly).
			require.Equal(t, 1, sink.handsOf(scheduled))
			require.False(t, hands[scheduled][0].dbStart.Before(notBefore), "handed at %s, before %s",
				hands[scheduled][0].dbStart, notBefore)
			require.Less(t, hands[scheduled][0].dbStart.Sub(notBefore), skewLate)

			require.Equal(t, 1, b.count(t, fmt.Sprintf("id = '%s' AND attempts = 1 AND hands = 2", retry)))
			require.Equal(t, 1, b.count(t, fmt.Sprintf("id = '%s' AND attempts = 0 AND hands = 2", overrun)))
			require.Zero(t, b.count(t, "failed_at IS NOT NULL"))
		})
	}
}

// clock reads the database's clock.
func (b testBundle) clock(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// stageKinds commits one record of each kind for module, in one batch,
// with the NotBefore that notBefore gives its kind, and returns their ids.
func (b testBundle) stageKinds(t *testing.T, notBefore map[string]time.Time, kinds ...string) []uuid.UUID {
	t.Helper()
	msgs := make([]relay.Message, len(kinds))
	for i, kind := range kinds {
		msgs[i] = relay.Message{Module: module, Kind: kind, Payload: payload(i), NotBefore: notBefore[kind]}
	}
	ids, err := b.ob.StageBatch(t.Context(), b.db, msgs)
	require.NoError(t, err)
	return ids
}
