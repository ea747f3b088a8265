package notification_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/child"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

// childLease is the child relay's lease: short, so that the crash test
// lets it run out for real.
const childLease = 3 * time.Second

// The crash test runs a dispatcher in a child process: the test binary run
// again with these variables set.
const (
	envChildDSN    = "TIDINGS_NOTIFICATION_CHILD_DSN"
	envChildSchema = "TIDINGS_NOTIFICATION_CHILD_SCHEMA"
)

// runChild runs the child dispatcher when the variables say so, and
// reports whether it did. Its delivery plays a provider that accepts the
// message ("accepted <id>" on stdout) and then never returns: the process
// is killed before the claim commits.
func runChild() bool {
	return child.Run(envChildDSN, func(ctx context.Context, dsn string) error {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			return err
		}
		accepting := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
			fmt.Printf("accepted %s\n", p.ID)
			<-ctx.Done()
			return delivery.Retry(ctx.Err())
		})
		d, err := notification.NewDispatcher(&notification.Config{Consumer: consumer,
			Deliveries: map[string]delivery.Delivery{"mail": accepting}})
		if err != nil {
			return err
		}
		return relay.Supervise(ctx, db, &relay.Config{Module: module, Schema: os.Getenv(envChildSchema), Listener: pqlisten.New(dsn),
			HandTimeout: childLease - time.Second, Lease: childLease}, d)
	})
}

func TestCrashAfterTheProviderAcceptedDeliversAgainWithTheSameID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.stage(t, mailTo("a@example.com"))[0]

	c := child.Test(t, map[string]string{envChildDSN: pgtest.URL(t), envChildSchema: b.schema}, true)
	line, err := c.Next("accepted ", testwait.Within)
	require.NoError(t, err, "the child hands the request to its provider")
	accepted := uuid.MustParse(line)
	require.Equal(t, id, accepted)
	require.NoError(t, c.Kill())
	require.Equal(t, 0, b.claims(t, id), "the claim died with its transaction")

	// Another relay takes the request once the dead relay's lease has run
	// out, and not before.
	killed := time.Now()
	b.run(t, b.dispatcher(t, b.config()))
	st := b.waitSettled(t, id)
	require.Equal(t, relay.StateProcessed, st.State)
	require.Equal(t, 2, st.Hands)
	require.Greater(t, time.Since(killed), childLease/2, "handed again only after the lease ran out")
	got := b.mail.Requests()
	require.Len(t, got, 1)
	require.Equal(t, accepted, got[0].ID, "the provider sees the same idempotency key")
	require.Equal(t, 1, got[0].Attempt, "a crash is no answer: still the first attempt")
	require.Equal(t, 1, b.claims(t, id))
}
