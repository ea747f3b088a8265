package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tidings-go/tidings/internal/ledger"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestExplain(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	receipts := []ledger.Receipt{
		{ID: a, SendStart: at(0), At: at(10)},
		{ID: a, SendStart: at(3000), At: at(3010)}, // the fault at 50-60 ms hit the first send
		{ID: b, SendStart: at(100), At: at(110)},
		{ID: b, SendStart: at(200), At: at(210)}, // no fault between 100 and 210 ms
		{ID: c, At: at(20)},                      // no send start: the window opens at the receipt
		{ID: c, At: at(4000)},
	}
	faults := []ledger.Fault{{Kind: "kill", Before: at(50), After: at(60)}}
	duplicated, extra, explained, late, after, unexplained := ledger.Explain(receipts, faults, nil, nil, 0, 0)
	require.Equal(t, 3, duplicated)
	require.Equal(t, 3, extra)
	require.Equal(t, 2, explained)
	require.Zero(t, late)
	require.Zero(t, after)
	require.Len(t, unexplained, 1)
	require.Equal(t, b, unexplained[0].ID)

	// A repeat whose previous send reached the provider only past the
	// deliveries' timeout is late: that delivery answered Retry while its
	// request was on its way. One that reached it sooner is not.
	slow := []ledger.Receipt{{ID: b, SendStart: at(100), At: at(2100)}, {ID: b, SendStart: at(2500), At: at(2510)}}
	_, _, explained, late, _, unexplained = ledger.Explain(slow, nil, nil, nil, 0, 2*time.Second)
	require.Zero(t, explained)
	require.Equal(t, 1, late)
	require.Empty(t, unexplained)
	_, _, _, late, _, unexplained = ledger.Explain(slow, nil, nil, nil, 0, 3*time.Second)
	require.Zero(t, late)
	require.Len(t, unexplained, 1)
	// Nor is a repeat after a send that reached the provider at once and
	// whose answer came too late: the relay's machine stalled, and the
	// dispatcher timed the delivery out. Its timeline says so, once per
	// such hand.
	quick := []ledger.Receipt{{ID: b, SendStart: at(100), At: at(110)}, {ID: b, SendStart: at(2500), At: at(2510)},
		{ID: b, SendStart: at(5000), At: at(5010)}}
	_, _, _, late, _, unexplained = ledger.Explain(quick, nil, nil, map[uuid.UUID]int{b: 1}, 0, 2*time.Second)
	require.Equal(t, 1, late)
	require.Len(t, unexplained, 1, "one timed-out hand explains one repeat")

	// A fault that ended just as the send began still overlaps it.
	_, _, explained, _, _, unexplained = ledger.Explain(receipts[2:4], []ledger.Fault{{Before: at(90), After: at(100)}}, nil, nil, 0, 0)
	require.Equal(t, 1, explained)
	require.Empty(t, unexplained)
	// One that ended before it does not.
	_, _, explained, _, _, _ = ledger.Explain(receipts[2:4], []ledger.Fault{{Before: at(90), After: at(99)}}, nil, nil, 0, 0)
	require.Zero(t, explained)

	// A receipt after its claim committed is a double send, even inside a
	// fault's window: the claim should have stopped it.
	committed := map[uuid.UUID]time.Time{a: at(20)}
	_, _, explained, _, after, unexplained = ledger.Explain(receipts[:2], faults, committed, nil, 0, 0)
	require.Zero(t, explained)
	require.Equal(t, 1, after)
	require.Len(t, unexplained, 1)
	require.Contains(t, unexplained[0].Why, "after its claim committed")
	// Before the commit, the same repeat is the fault's doing.
	committed[a] = at(3020)
	_, _, explained, _, after, _ = ledger.Explain(receipts[:2], faults, committed, nil, 0, 0)
	require.Equal(t, 1, explained)
	require.Zero(t, after)

	// One fault explains no more repeats than were in flight.
	var many []ledger.Receipt
	for i := range 3 {
		id := uuid.New()
		many = append(many, ledger.Receipt{ID: id, SendStart: at(i), At: at(10 + i)}, ledger.Receipt{ID: id, SendStart: at(3000), At: at(3010 + i)})
	}
	_, _, explained, _, _, unexplained = ledger.Explain(many, faults, nil, nil, 2, 0)
	require.Equal(t, 2, explained)
	require.Len(t, unexplained, 1)
	require.Contains(t, unexplained[0].Why, "as many as deliveries were in flight")
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, ledger.Percentile(ds, 50))
	require.Equal(t, 99*time.Millisecond, ledger.Percentile(ds, 99))
	require.Equal(t, 100*time.Millisecond, ledger.Percentile(ds, 100))
	require.Zero(t, ledger.Percentile(nil, 50))
}

func TestProviderRecordsEveryRequest(t *testing.T) {
	t.Parallel()
	p, err := ledger.StartProvider(time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	c := ledger.NewClient(p.URL())
	t.Cleanup(c.Close)

	id := uuid.New()
	staged := time.Now().Add(-time.Second).Round(0)
	start := time.Now()
	require.NoError(t, c.Send(t.Context(), id, staged))
	require.NoError(t, c.Send(t.Context(), id, staged))
	n, err := p.WaitDistinct(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got := p.Receipts()
	require.Len(t, got, 2)
	for _, r := range got {
		require.Equal(t, id, r.ID)
		require.Equal(t, id.String(), r.Key)
		require.True(t, staged.Equal(r.StagedAt))
		require.False(t, r.SendStart.Before(start.Round(0)), "stamped when the send began")
		require.False(t, r.At.Before(r.SendStart))
	}
	// A hand start in the context opens the window instead.
	hand := time.Now().Add(-time.Second).Round(0)
	require.NoError(t, c.Send(ledger.WithHandStart(t.Context(), hand), id, staged))
	require.True(t, hand.Equal(p.Receipts()[2].SendStart))
	receipts, distinct := p.Counts()
	require.Equal(t, 3, receipts)
	require.Equal(t, 1, distinct)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_, err = p.WaitDistinct(ctx, 2)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
