package notification_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/testwait"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// phoneBook is a Resolver of user ids to numbers that fails while down
// and records what it was asked, batch by batch.
type phoneBook struct {
	mu      sync.Mutex
	numbers map[string]string
	down    bool
	asked   [][]string
}

func (pb *phoneBook) Resolve(_ context.Context, users []string) (map[string]string, error) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	pb.asked = append(pb.asked, slices.Clone(users))
	if pb.down {
		return nil, errors.New("the directory is down")
	}
	out := map[string]string{}
	for _, u := range users {
		if n, ok := pb.numbers[u]; ok {
			out[u] = n
		}
	}
	return out, nil
}

func (pb *phoneBook) set(f func(pb *phoneBook)) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	f(pb)
}

// A channel's Resolver turns the user a request names into the address
// its delivery sends to, once per batch for its distinct recipients,
// before the recipient rules: the delivery sees the address, the
// suppression of the address stops the request, a user without one (or
// with one no Recipient could be) ends dead with recipient.unresolved,
// and a failed lookup is retried as the Policy says, a provider's outage
// is.
func TestResolvers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pb := &phoneBook{numbers: map[string]string{"user-1": "+15550001", "user-2": "+15550002", "user-3": "+15550003",
		"user-nul": "+1555\x000004"}}
	cfg := b.config()
	cfg.Resolvers = map[string]notification.Resolver{"sms": pb}
	b.inTx(t, func(tx *sql.Tx) {
		require.NoError(t, b.client.Suppress(t.Context(), tx, notification.Suppression{Channel: "sms", Address: "+15550002"}))
	})
	text := func(user string) notification.Request {
		return notification.Request{Channel: "sms", Recipient: user, Template: "booked"}
	}
	// Staged before the relay runs, so that one batch holds them all.
	ids := b.stage(t, text("user-1"), text("user-1"), text("user-2"), text("nobody"), mailTo("user-1"), text("user-nul"))
	b.run(t, b.dispatcher(t, cfg))

	for _, id := range ids[:2] {
		st := b.waitOutcome(t, id)
		require.Equal(t, notification.OutcomeDelivered, st.Outcome)
	}
	got := b.sms.Requests()
	require.Len(t, got, 2)
	for _, p := range got {
		require.Equal(t, "+15550001", p.Recipient, "the delivery sends to the address")
	}
	require.Equal(t, [][]string{{"user-1", "user-2", "nobody", "user-nul"}}, pb.asked, "one call per batch, each recipient once, sms only")

	st := b.waitOutcome(t, ids[2])
	require.Equal(t, notification.OutcomeSuppressed, st.Outcome, "the resolved address is suppressed")
	require.Zero(t, b.sms.Count(ids[2]))

	st = b.waitOutcome(t, ids[3])
	require.Equal(t, relay.StateDead, st.State)
	require.Equal(t, notification.CodeUnresolved, st.Code)
	require.Equal(t, `the Resolver of channel "sms" has no address for the recipient`, st.Reason)

	st = b.waitOutcome(t, ids[5])
	require.Equal(t, relay.StateDead, st.State)
	require.Equal(t, notification.CodeUnresolved, st.Code)
	require.Equal(t, `the Resolver of channel "sms" answered an address that cannot be stored: its address holds a NUL character, which PostgreSQL cannot store`, st.Reason)

	require.Equal(t, "user-1", b.mail.Requests()[0].Recipient, "a channel without a Resolver sends to the recipient")

	t.Run("Down", func(t *testing.T) {
		pb.set(func(pb *phoneBook) { pb.down = true; pb.asked = nil })
		id := b.stage(t, text("user-3"))[0]
		require.Eventually(t, func() bool { return b.status(t, id).Attempts >= 2 }, 15*time.Second, 5*time.Millisecond,
			"waiting for the failed lookups to retry the request")
		st := b.status(t, id)
		require.Equal(t, relay.StatePending, st.State)
		require.Zero(t, st.Unsure, "a failed lookup is no fault of the claim's transaction")
		require.Equal(t, notification.CodeResolveFailed, st.Code)
		pb.set(func(pb *phoneBook) { pb.down = false })
		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, id).Outcome)
		require.Equal(t, 1, b.sms.Count(id))
		require.Equal(t, "+15550003", requestOf(t, b.sms.Requests(), id).Recipient)
	})
	t.Run("Config", func(t *testing.T) {
		for name, rs := range map[string]map[string]notification.Resolver{
			`Resolvers["push"] names no channel`: {"push": pb},
			`Resolvers["sms"] is nil`:            {"sms": nil},
		} {
			cfg := b.config()
			cfg.Resolvers = rs
			_, err := notification.NewDispatcher(&cfg)
			require.ErrorIs(t, err, notification.ErrConfig)
			require.ErrorContains(t, err, name)
		}
	})
}

// A slow directory slows only its own channel (G7): a mail in the same
// batch as a text whose lookup hangs is delivered on its first attempt
// while the lookup still hangs; the text is retried when it fails.
func TestASlowResolverHoldsBackOnlyItsChannel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var returned atomic.Bool
	cfg := b.config()
	cfg.Resolvers = map[string]notification.Resolver{"sms": notification.ResolverFunc(
		func(ctx context.Context, _ []string) (map[string]string, error) {
			defer returned.Store(true)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-release:
				return nil, errors.New("the directory is down")
			}
		})}
	// Staged before the relay runs, so that one batch holds both.
	ids := b.stage(t, notification.Request{Channel: "sms", Recipient: "user-1", Template: "booked"}, mailTo("user-1"))
	b.run(t, b.dispatcher(t, cfg))

	st := b.waitOutcome(t, ids[1])
	require.Equal(t, notification.OutcomeDelivered, st.Outcome)
	require.Zero(t, st.Attempts, "delivered on its first attempt, not after a timeout")
	require.False(t, returned.Load(), "delivered while the text's lookup still hangs")
	once.Do(func() { close(release) })
	require.Eventually(t, func() bool { return b.status(t, ids[0]).Code == notification.CodeResolveFailed },
		testwait.Within, 10*time.Millisecond, "the text retried once its lookup failed")
}

// A Resolver that panics is a failed lookup, retried as the Policy says:
// the process, and every other delivery in it, goes on.
func TestAPanickingResolverIsAFailedLookup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Resolvers = map[string]notification.Resolver{"sms": notification.ResolverFunc(
		func(context.Context, []string) (map[string]string, error) { panic("directory bug") })}
	ids := b.stage(t, notification.Request{Channel: "sms", Recipient: "user-1", Template: "booked"}, mailTo("user-1"))
	b.run(t, b.dispatcher(t, cfg))

	require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, ids[1]).Outcome)
	require.Eventually(t, func() bool { return b.status(t, ids[0]).Code == notification.CodeResolveFailed },
		testwait.Within, 10*time.Millisecond, "the text retried as a failed lookup")
	require.Contains(t, b.status(t, ids[0]).LastError, "the Resolver panicked: directory bug")
}

// requestOf returns the request of id among ps.
func requestOf(t *testing.T, ps []delivery.Pending, id uuid.UUID) delivery.Pending {
	t.Helper()
	i := slices.IndexFunc(ps, func(p delivery.Pending) bool { return p.ID == id })
	require.GreaterOrEqual(t, i, 0, "no request %s among %d", id, len(ps))
	return ps[i]
}

// A request delivered by a hand whose settle was lost is handed again
// (here by a re-emit) after its user lost their number: its committed
// inbox claim says it was delivered, so it is not dead as unresolved (a
// re-emit of that once the claim is purged would send it twice), and the
// provider is not called again.
func TestAnUnresolvedRecipientDoesNotEndARequestDeliveredBefore(t *testing.T) {
	t.Parallel()
	eachCommit(t, func(t *testing.T, commit map[string]notification.Commit) {
		b := setup(t)
		pb := &phoneBook{numbers: map[string]string{"user-1": "+15550001"}}
		cfg := b.config()
		cfg.Commit = commit
		cfg.Resolvers = map[string]notification.Resolver{"sms": pb}
		b.run(t, b.dispatcher(t, cfg))
		id := b.stage(t, notification.Request{Channel: "sms", Recipient: "user-1", Template: "booked"})[0]
		require.Equal(t, notification.OutcomeDelivered, b.waitOutcome(t, id).Outcome)

		pb.set(func(pb *phoneBook) { delete(pb.numbers, "user-1") })
		b.loseSettleAndReemit(t, id)
		st := b.waitOutcome(t, id)
		require.Equal(t, notification.OutcomeDelivered, st.Outcome, "delivered before; not unresolved: %+v", st)
		require.Equal(t, notification.CodeDelivered, st.Code)
		require.Equal(t, 1, b.sms.Count(id), "delivered once")
	})
}
