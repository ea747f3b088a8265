package mail_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/mail"
)

// Deliver keeps connections between deliveries; one the server closed
// costs a new connection or a Retry, never the message.
func TestDeliverKeepsConnections(t *testing.T) {
	t.Parallel()

	// keeping keeps idle connections for longer than any test takes, so
	// that only what a test does closes them.
	keeping := func(cfg *mail.Config) {
		cfg.IdleTimeout = time.Hour
	}
	withCredentials := func(cfg *mail.Config) {
		cfg.Username, cfg.Password = testUsername, testPassword
	}
	authenticating := serverOptions{username: testUsername, password: testPassword}
	deliver := func(t *testing.T, b *testBundle) {
		t.Helper()
		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindDelivered, outcome.Kind(), "%v", outcome)
	}

	t.Run("OneConnectionOneAUTH", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authenticating, withCredentials, keeping)

		for range 3 {
			deliver(t, b)
		}
		require.Len(t, b.srv.accepted(), 3)
		require.Equal(t, 1, b.srv.connections(t))
		require.Len(t, b.srv.authAttempts(), 1)
	})

	t.Run("NoneWhenMaxIdleConnsIsNegative", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping, func(cfg *mail.Config) { cfg.MaxIdleConns = -1 })

		deliver(t, b)
		b.srv.waitOpen(t, 0)
		deliver(t, b)
		require.Equal(t, 2, b.srv.connections(t))
	})

	// The server closed the kept connection while it was idle: MAIL FROM
	// fails before any of the message went out, and the message goes on
	// a new connection.
	t.Run("ServerClosedTheKeptConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authenticating, withCredentials, keeping)
		deliver(t, b)
		b.srv.closeConnections()
		b.srv.waitOpen(t, 0)

		deliver(t, b)
		require.Len(t, b.srv.accepted(), 2)
		require.Equal(t, 2, b.srv.connections(t))
		require.Len(t, b.srv.authAttempts(), 2)
	})

	// A server that takes one message per connection says 421 to the
	// next MAIL FROM: the message goes on a new connection.
	t.Run("ServerClosesTheKeptConnectionWith421", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{perConnection: 1}, keeping)

		deliver(t, b)
		deliver(t, b)
		require.Len(t, b.srv.accepted(), 2)
		require.Equal(t, 2, b.srv.connections(t))
	})

	// Once MAIL FROM was answered, a connection that breaks is a Retry:
	// the message may have reached the server, and is not sent again
	// behind the retry policy's back.
	t.Run("ServerClosedTheKeptConnectionMidMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping)
		deliver(t, b)
		b.srv.whenStalled(t, phaseRcpt, b.srv.closeConnections)

		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.Regexp(t, `^mail: RCPT TO: `, outcome.Reason().Error())
		require.Equal(t, 1, b.srv.connections(t))
	})

	// A connection whose exchange failed is closed, not kept: the next
	// message starts on a new one.
	t.Run("NotKeptAfterAFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping)
		b.srv.failAt(phaseRcpt, 550, smtp.EnhancedCode{5, 1, 1}, "no such user")
		outcome := b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindReject, outcome.Kind(), "%v", outcome)
		b.srv.waitOpen(t, 0)
		b.srv.succeed()

		deliver(t, b)
		require.Equal(t, 2, b.srv.connections(t))
	})

	// A context that ends while a kept connection carries the message is
	// the context's end, not a closed connection to replace.
	t.Run("CancelledOnTheKeptConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping)
		deliver(t, b)
		ctx, cancel := context.WithCancel(t.Context())
		b.srv.whenStalled(t, phaseMail, cancel)

		outcome := b.mailer.Deliver(ctx, newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.ErrorIs(t, outcome.Reason(), context.Canceled)
		require.EqualError(t, outcome.Reason(), "mail: MAIL FROM: cancelled")
		require.Equal(t, 1, b.srv.connections(t))
	})

	// A request whose context ended before Deliver leaves the kept
	// connection alone.
	t.Run("CancelledLeavesTheKeptConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping)
		deliver(t, b)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		outcome := b.mailer.Deliver(ctx, newPending("welcome", welcomeData()))
		require.Equal(t, delivery.KindRetry, outcome.Kind(), "%v", outcome)
		require.EqualError(t, outcome.Reason(), "mail: connect: cancelled")
		deliver(t, b)
		require.Equal(t, 1, b.srv.connections(t))
	})

	// Four messages at once use four connections; two are kept after.
	t.Run("KeepsAtMostMaxIdleConns", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping, func(cfg *mail.Config) { cfg.MaxIdleConns = 2 })
		release := b.srv.holdAt(phaseData)
		const n = 4

		var wg sync.WaitGroup
		outcomes := make([]delivery.Outcome, n)
		for i := range n {
			wg.Go(func() {
				outcomes[i] = b.mailer.Deliver(t.Context(), newPending("welcome", welcomeData()))
			})
		}
		for range n {
			select {
			case <-b.srv.stalled:
			case <-time.After(5 * time.Second):
				release()
				require.FailNow(t, "waited 5s for four messages to reach DATA at once")
			}
		}
		release()
		wg.Wait()
		for _, o := range outcomes {
			require.Equal(t, delivery.KindDelivered, o.Kind(), "%v", o)
		}
		b.srv.waitOpen(t, 2)

		require.NoError(t, b.mailer.Close())
		b.srv.waitOpen(t, 0)
		require.Equal(t, n, b.srv.connections(t))
	})

	// However busy, a connection is not kept past its maximum age (5
	// minutes; a nanosecond here) after it was opened.
	t.Run("NotKeptPastItsAge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping)
		mail.SetMaxConnAge(b.mailer, time.Nanosecond)

		deliver(t, b)
		b.srv.waitOpen(t, 0)
		deliver(t, b)
		require.Equal(t, 2, b.srv.connections(t))
	})

	t.Run("ClosesIdleConnections", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, func(cfg *mail.Config) { cfg.IdleTimeout = 50 * time.Millisecond })

		deliver(t, b)
		b.srv.waitOpen(t, 0)
		deliver(t, b)
		require.Equal(t, 2, b.srv.connections(t))
	})

	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		b := setup(t, serverOptions{}, keeping)
		deliver(t, b)
		b.srv.waitOpen(t, 1)

		require.NoError(t, b.mailer.Close())
		b.srv.waitOpen(t, 0)
		// After Close, a Deliver closes its connection when done.
		deliver(t, b)
		b.srv.waitOpen(t, 0)
		require.Equal(t, 2, b.srv.connections(t))
	})
}
