package relay_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/relay"
)

// A Waker sends one wake-up per module after the writers' commits, outside
// their transactions; records staged without the wake-up reach a listening
// relay through it, long before the sweep.
func TestWakerWakesAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := pq.NewListener(pgtest.URL(t), 10*time.Millisecond, time.Second, nil)
	t.Cleanup(func() { _ = l.Close() })
	require.NoError(t, l.Listen(b.schema+".outbox"))
	next := func() string {
		t.Helper()
		select {
		case n := <-l.Notify:
			return n.Extra
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up")
			return ""
		}
	}

	w := b.ob.NewWaker(b.db)
	quiet := b.ob.WithoutWakeUp()
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = quiet.Stage(t.Context(), tx, relay.Message{Module: module, Kind: "order.placed", Payload: payload(1)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	w.Wake(module)
	require.Equal(t, module, next(), "the first notification is the waker's: the commit sent none")

	require.NoError(t, w.Close())

	// Wakes that arrive while a wake-up is in flight share the next one,
	// however many: the waker's pool holds one connection, which the test
	// keeps until the first wake-up waits for it.
	one := pgtest.Open(t, 1)
	held, err := one.Conn(t.Context())
	require.NoError(t, err)
	w = b.ob.NewWaker(one)
	w.Wake("x")
	require.Eventually(t, func() bool { return one.Stats().WaitCount > 0 }, testwait.Within, time.Millisecond,
		"the first wake-up waits for the pool's connection")
	for range 20 {
		w.Wake("a")
		w.Wake("b")
	}
	require.NoError(t, held.Close())
	require.NoError(t, w.Close())
	// A notification sent after Close follows every one the waker sent.
	_, err = b.db.ExecContext(t.Context(), `SELECT pg_notify($1, 'end')`, b.schema+".outbox")
	require.NoError(t, err)
	require.Equal(t, "x", next())
	require.Equal(t, map[string]bool{"a": true, "b": true}, map[string]bool{next(): true, next(): true})
	require.Equal(t, "end", next(), "one wake-up for the 40 wakes of a and b")

	// End to end: a relay that sweeps once an hour hands what the waker
	// announces.
	sink := newRecorder(nil)
	supervise(t, b.db, b.config(t), sink)
	sink.waitHands(t, 1, 10*time.Second) // the first record, found at start
	w = b.ob.NewWaker(b.db)
	for round := 1; round <= 3; round++ {
		tx, err := b.db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		_, err = quiet.Stage(t.Context(), tx, relay.Message{Module: module, Kind: "order.placed", Payload: payload(round)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		w.Wake(module)
		sink.waitHands(t, 1+round, 10*time.Second)
	}
	require.NoError(t, w.Close())
}

// A wake-up that cannot be sent is reported by Close; Wake never blocks.
func TestWakerReportsAFailedWakeUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db, err := sql.Open("postgres", pgtest.URL(t))
	require.NoError(t, err)
	require.NoError(t, db.Close())

	w := b.ob.NewWaker(db)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			w.Wake(module)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wake blocked")
	}
	err = w.Close()
	require.ErrorContains(t, err, "relay: wake [orders]")
	require.ErrorContains(t, err, "database is closed")
}
