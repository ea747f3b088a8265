package notification_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
)

// Times are the database's: a request that fails while the database's
// clock gives it minutes before it expires is retried, though this
// process's clock, ten minutes ahead of the database's, has it expired
// already. The skew is made on the database's side (pgtemp's
// ClockOffset), since Go reads the system clock without libc.
func TestARetryBeforeTheExpiryIsJudgedOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	app, _ := pgtest.Cluster(t, &pgtemp.Options{ClockOffset: -10 * time.Minute}, tidings.Migrate, tidings.SchemaDefault)
	db := drivertest.For(t).Open(t, app, 20).DB
	client, err := notification.NewClient(db, &notification.ClientConfig{Consumer: consumer})
	require.NoError(t, err)

	b := testBundle{db: db, schema: tidings.SchemaDefault, client: client, mail: recording.New(), sms: recording.New()}
	cfg := b.config()
	cfg.Deliveries["mail"] = delivery.Func(func(_ context.Context, p delivery.Pending) delivery.Outcome {
		if p.Attempt == 1 {
			return delivery.Retry(errors.New("mailbox server busy"))
		}
		return delivery.Delivered()
	})
	// And a directory that fails its first lookup: the retry it causes is
	// judged on the database's clock too, at the next hand.
	var lookups atomic.Int32
	cfg.Resolvers = map[string]notification.Resolver{"sms": notification.ResolverFunc(
		func(_ context.Context, recipients []string) (map[string]string, error) {
			if lookups.Add(1) == 1 {
				return nil, errors.New("directory down")
			}
			return map[string]string{recipients[0]: "+15550009"}, nil
		})}
	rc := b.relayConfig(t)
	rc.Listener = drivertest.For(t).Listener(t, app)
	rc.Pipeline = drivertest.For(t).Pipeline()
	b.runWith(t, rc, b.dispatcher(t, cfg))

	var dbNow time.Time
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT now()`).Scan(&dbNow))
	id, err := client.Stage(t.Context(), db, module, notification.Request{Channel: "mail", Recipient: "a@example.com",
		ExpiresAt: dbNow.Add(5 * time.Minute)})
	require.NoError(t, err)
	st := b.waitOutcome(t, id)
	require.Equal(t, notification.OutcomeDelivered, st.Outcome, "%+v", st)
	require.Equal(t, 1, st.Attempts, "one retry, then delivered")
	require.Equal(t, relay.StateProcessed, st.State)

	id, err = client.Stage(t.Context(), db, module, notification.Request{Channel: "sms", Recipient: "user-9",
		ExpiresAt: dbNow.Add(5 * time.Minute)})
	require.NoError(t, err)
	st = b.waitOutcome(t, id)
	require.Equal(t, notification.OutcomeDelivered, st.Outcome, "%+v", st)
	require.Equal(t, 1, st.Attempts, "one retry after the failed lookup, then delivered")
}
