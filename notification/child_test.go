package notification_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
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
	dsn := os.Getenv(envChildDSN)
	if dsn == "" {
		return false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	schema := os.Getenv(envChildSchema)
	accepting := delivery.Func(func(ctx context.Context, p delivery.Pending) delivery.Outcome {
		fmt.Printf("accepted %s\n", p.ID)
		<-ctx.Done()
		return delivery.Retry(ctx.Err())
	})
	d, err := notification.NewDispatcher(&notification.Config{Consumer: consumer,
		Deliveries: map[string]delivery.Delivery{"mail": accepting}})
	if err == nil {
		err = relay.Supervise(ctx, db, &relay.Config{Module: module, Schema: schema, ListenDSN: dsn,
			HandTimeout: childLease - time.Second, Lease: childLease}, d)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return true
}

func TestCrashAfterTheProviderAcceptedDeliversAgainWithTheSameID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.stage(t, mailTo("a@example.com"))[0]

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChildDSN+"="+b.relayConfig(t).ListenDSN, envChildSchema+"="+b.schema)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	lines := bufio.NewScanner(out)
	var accepted uuid.UUID
	for lines.Scan() {
		if s, ok := strings.CutPrefix(lines.Text(), "accepted "); ok {
			accepted = uuid.MustParse(s)
			break
		}
	}
	require.Equal(t, id, accepted)
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
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
