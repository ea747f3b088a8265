package relay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/relay"
)

func TestFindByCorrelation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stage := func(ctx context.Context, kind string) uuid.UUID {
		t.Helper()
		id, err := b.ob.Stage(ctx, b.db, relay.Message{Module: module, Kind: kind, Payload: payload(1)})
		require.NoError(t, err)
		return id
	}
	order7 := relay.WithCorrelationID(t.Context(), "order-7")
	placed := stage(order7, "order.placed")
	shipped := stage(order7, "order.shipped")
	stage(relay.WithCorrelationID(t.Context(), "order-8"), "order.placed")
	// A record staged without a correlation id is its own; what its hand
	// stages carries its id (Record.Context).
	root := stage(t.Context(), "order.placed")
	child := stage(relay.WithCorrelationID(t.Context(), root.String()), "order.shipped")
	cancelled, err := b.ob.Cancel(t.Context(), b.db, shipped)
	require.NoError(t, err)
	require.True(t, cancelled)

	ids := func(found []relay.Summary) []uuid.UUID {
		var out []uuid.UUID
		for _, s := range found {
			out = append(out, s.ID)
		}
		return out
	}
	find := func(id, kind string, limit int) []relay.Summary {
		t.Helper()
		found, err := b.ob.FindByCorrelation(t.Context(), b.db, id, kind, limit)
		require.NoError(t, err)
		return found
	}

	found := find("order-7", "", 0)
	require.Equal(t, []uuid.UUID{placed, shipped}, ids(found), "oldest first")
	require.Equal(t, relay.StatePending, found[0].State)
	require.True(t, found[0].SettledAt.IsZero())
	require.Equal(t, module, found[0].Module)
	require.Equal(t, "order.placed", found[0].Kind)
	require.Equal(t, relay.StateCancelled, found[1].State)
	require.Equal(t, relay.CodeCancelled, found[1].Code)
	require.False(t, found[1].SettledAt.IsZero())

	require.Equal(t, []uuid.UUID{shipped}, ids(find("order-7", "order.shipped", 0)), "of one kind")
	require.Equal(t, []uuid.UUID{placed}, ids(find("order-7", "", 1)), "at most the limit")
	require.Equal(t, []uuid.UUID{root, child}, ids(find(root.String(), "", 0)), "the record whose id it is, and its hand's")
	require.Empty(t, find(child.String(), "", 0), "a record under another's correlation id is found under that one only")
	require.Empty(t, find("order-9", "", 0))
	require.Empty(t, find(strings.ToUpper(root.String()), "", 0), "correlation ids are text, matched exactly")

	_, err = b.ob.FindByCorrelation(t.Context(), b.db, "", "", 0)
	require.ErrorContains(t, err, "correlation id is empty")
	_, err = b.ob.FindByCorrelation(t.Context(), b.db, "order-7", "", relay.FindLimitMax+1)
	require.ErrorContains(t, err, "limit 1001 is above FindLimitMax")
}
