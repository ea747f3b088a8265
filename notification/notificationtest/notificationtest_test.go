package notificationtest_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/notificationtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// failing is a testing.TB that records a failure instead of failing the
// test it runs in: the checks' own failures are what is tested.
type failing struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *failing) Helper() {}

func (f *failing) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// fails runs check against a failing TB and returns its failure, or "".
func fails(t *testing.T, check func(tb testing.TB)) string {
	t.Helper()
	f := &failing{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(f)
	}()
	testwait.Recv(t, done, "the check to end")
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	db := pgtest.AdminDB(t)
	schema := notificationtest.Schema(t, db)
	client, err := notification.NewClient(db, &notification.ClientConfig{Schema: schema})
	require.NoError(t, err)

	// Staged before the recorder: not its business.
	_, err = client.Stage(t.Context(), db, "bookings", notification.Request{Channel: "mail", Recipient: "old@example.com"})
	require.NoError(t, err)
	// A transaction that began before the recorder and commits after it
	// staged after it.
	early, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = early.ExecContext(t.Context(), `SELECT 1`) // begun for the server too: now() is fixed
	require.NoError(t, err)
	staged := notificationtest.New(t, db, schema)
	staged.RequireNone(t, notificationtest.Want{})
	_, err = client.Stage(t.Context(), early, "bookings", notification.Request{Channel: "in_app", Recipient: "user-7"})
	require.NoError(t, err)
	require.NoError(t, early.Commit())
	staged.Require(t, notificationtest.Want{Channel: "in_app"})

	// The code under test: a committed write, and a rolled-back one.
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = client.StageBatch(t.Context(), tx, "bookings", []notification.Request{
		{Channel: "mail", Recipient: "ada@example.com", Template: "booking_confirmed", Data: map[string]any{"booking_id": 7, "lot": "B"}},
		{Channel: "push", Recipient: "token-1", Template: "booking_confirmed", Data: map[string]any{"booking_id": 7}},
		{Channel: "push", Recipient: "token-2", Template: "reminder", NotBefore: later},
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	tx, err = db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = client.Stage(t.Context(), tx, "bookings", notification.Request{Channel: "sms", Recipient: "+15005550006"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())

	mail := staged.Require(t, notificationtest.Want{Channel: "mail", Recipient: "ada@example.com", Data: map[string]any{"booking_id": 7}})
	require.Equal(t, "booking_confirmed", mail.Template)
	require.Equal(t, "bookings", mail.Module)
	require.Equal(t, map[string]any{"booking_id": 7.0, "lot": "B"}, mail.Data)
	require.Len(t, staged.RequireN(t, notificationtest.Want{Channel: "push"}, 2), 2)
	reminder := staged.Require(t, notificationtest.Want{Template: "reminder"})
	require.True(t, reminder.NotBefore.Equal(later), "scheduled %s, want %s", reminder.NotBefore, later)
	staged.RequireNone(t, notificationtest.Want{Channel: "sms"}) // rolled back
	require.Len(t, staged.All(t), 4)

	// The checks fail when the staging is not what they want, and say what
	// was staged.
	msg := fails(t, func(tb testing.TB) { staged.Require(tb, notificationtest.Want{Channel: "push"}) })
	require.Contains(t, msg, "want 1 staged requests of channel push, have 2")
	require.Contains(t, msg, "recipient token-2")
	msg = fails(t, func(tb testing.TB) {
		staged.Require(tb, notificationtest.Want{Channel: "mail", Data: map[string]any{"booking_id": 8}})
	})
	require.Contains(t, msg, "have 0")
	msg = fails(t, func(tb testing.TB) { staged.RequireNone(tb, notificationtest.Want{}) })
	require.Contains(t, msg, "want no staged request of any request, have 4")
	require.Empty(t, fails(t, func(tb testing.TB) { staged.RequireNone(tb, notificationtest.Want{Channel: "sms"}) }))
}
