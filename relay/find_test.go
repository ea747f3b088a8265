package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

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

// A sink finds the records it processed by their result (through an
// index: TestOperatorQueriesReadOnlyTheirIndexes); finishes records it was not handed, once, while a hand of one
// cannot overwrite it; and notes what happened later on their timelines.
func TestFindByResultFinishAndNote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, err := b.ob.StageBatch(t.Context(), b.db, []relay.Message{
		{Module: module, Kind: "sent", Lane: "mail", Payload: payload(1)},
		{Module: module, Kind: "sent", Lane: "mail", Payload: payload(2)},
		{Module: module, Kind: "sent", Lane: "sms", Payload: payload(3)},
	})
	require.NoError(t, err)
	later, err := b.ob.Stage(t.Context(), b.db, relay.Message{Module: module, Kind: "sent", Lane: "mail", Payload: payload(4),
		NotBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	supervise(t, b.db, b.config(t), relay.SinkFunc(func(_ context.Context, rec relay.Record) relay.Result {
		return relay.DoneWith("ref-" + map[string]string{"mail": "a", "sms": "a"}[rec.Lane])
	}))
	b.eventually(t, "processed_at IS NOT NULL", 3, 10*time.Second)

	found, err := b.ob.FindByResult(t.Context(), b.db, "sent", "mail", "ref-a")
	require.NoError(t, err)
	require.Len(t, found, 2, "of its kind and lane")
	require.Equal(t, ids[:2], []uuid.UUID{found[0].ID, found[1].ID}, "oldest first")
	require.JSONEq(t, `{"n":1}`, string(found[0].Payload))
	require.Equal(t, module, found[0].Module)
	for _, tc := range []struct{ kind, lane, result string }{{"sent", "mail", "ref-b"}, {"other", "mail", "ref-a"}, {"sent", "mail", ""}} {
		found, err := b.ob.FindByResult(t.Context(), b.db, tc.kind, tc.lane, tc.result)
		require.NoError(t, err)
		require.Empty(t, found, "%+v", tc)
	}

	// Finish settles only what is pending, once.
	done, err := b.ob.Finish(t.Context(), b.db, []uuid.UUID{later, ids[0]}, "policy.suppressed", map[string]any{"rule": "suppression"})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{later}, done)
	done, err = b.ob.Finish(t.Context(), b.db, []uuid.UUID{later}, "policy.suppressed", nil)
	require.NoError(t, err)
	require.Empty(t, done)
	st, err := b.ob.Status(t.Context(), b.db, later)
	require.NoError(t, err)
	require.Equal(t, relay.StateProcessed, st.State)
	require.Equal(t, "policy.suppressed", st.Code)
	require.Empty(t, st.Result)
	last := st.Timeline[len(st.Timeline)-1]
	require.Equal(t, "done", last.Event)
	require.Equal(t, "suppression", last.Detail["rule"])
	require.Len(t, st.Timeline, 2, "staged, and the one done entry")

	// Note appends to the records that exist.
	require.NoError(t, b.ob.Note(t.Context(), b.db, []uuid.UUID{ids[0], uuid.New()}, "feedback", "bounce.permanent",
		map[string]any{"provider": "resend"}))
	st, err = b.ob.Status(t.Context(), b.db, ids[0])
	require.NoError(t, err)
	last = st.Timeline[len(st.Timeline)-1]
	require.Equal(t, "feedback", last.Event)
	require.Equal(t, "bounce.permanent", last.Code)
	require.Equal(t, "resend", last.Detail["provider"])
	require.Equal(t, relay.StateProcessed, st.State)
	require.Equal(t, "ref-a", st.Result, "a note changes no state")
	require.ErrorContains(t, b.ob.Note(t.Context(), b.db, ids, "", "", nil), "event is empty")
	require.ErrorContains(t, b.ob.Note(t.Context(), b.db, ids, "a\nb", "", nil), "event")
}
