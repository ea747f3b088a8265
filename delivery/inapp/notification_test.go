package inapp_test

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery/inapp"
)

func TestList(t *testing.T) {
	t.Parallel()

	t.Run("NewestFirstAndOwnOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.seed(t, "alice", minutes(1), minutes(3), minutes(2))
		b.seed(t, "bob", minutes(4))

		list, err := b.inapp.List(t.Context(), "alice", nil)
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{alice[1], alice[2], alice[0]}, ids(list))
		require.True(t, minutes(3).Equal(list[0].CreatedAt))
		require.Equal(t, "comment", list[0].Template)
		require.Equal(t, map[string]any{"n": "x"}, list[0].Data)
		require.Equal(t, "corr-1", list[0].CorrelationID)

		none, err := b.inapp.List(t.Context(), "carol", nil)
		require.NoError(t, err)
		require.Empty(t, none)
	})

	t.Run("UnreadOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.seed(t, "alice", minutes(1), minutes(2), minutes(3))
		_, err := b.inapp.MarkRead(t.Context(), "alice", alice[1])
		require.NoError(t, err)

		unread, err := b.inapp.List(t.Context(), "alice", &inapp.ListOpts{UnreadOnly: true})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{alice[2], alice[0]}, ids(unread))
		for _, n := range unread {
			require.False(t, n.Read())
		}
		all, err := b.inapp.List(t.Context(), "alice", nil)
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{alice[2], alice[1], alice[0]}, ids(all))
		require.True(t, all[1].Read())
		require.False(t, all[1].ReadAt.IsZero())
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.ExecContext(t.Context(), `INSERT INTO "`+b.schema+`".inapp_notifications (id, recipient)
			SELECT gen_random_uuid(), 'alice' FROM generate_series(1, $1)`, inapp.ListLimitMax+1)
		require.NoError(t, err)
		for _, tc := range []struct {
			limit, want int
		}{
			{0, inapp.ListLimitDefault},
			{1, 1},
			{7, 7},
			{inapp.ListLimitMax, inapp.ListLimitMax},
		} {
			list, err := b.inapp.List(t.Context(), "alice", &inapp.ListOpts{Limit: tc.limit})
			require.NoError(t, err)
			require.Len(t, list, tc.want, "limit %d", tc.limit)
		}
		for _, limit := range []int{-1, inapp.ListLimitMax + 1} {
			_, err := b.inapp.List(t.Context(), "alice", &inapp.ListOpts{Limit: limit})
			require.ErrorIs(t, err, inapp.ErrInvalid, "limit %d", limit)
		}
	})

	// Pages of two through notifications of which three share a creation
	// time: each appears once, in order.
	t.Run("CursorPaging", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "alice", minutes(1), minutes(2), minutes(2), minutes(2), minutes(3))
		b.seed(t, "bob", minutes(2), minutes(2))
		all, err := b.inapp.List(t.Context(), "alice", nil)
		require.NoError(t, err)
		require.Len(t, all, 5)
		require.True(t, slices.IsSortedFunc(all, func(x, y inapp.Notification) int {
			if c := y.CreatedAt.Compare(x.CreatedAt); c != 0 {
				return c
			}
			return bytes.Compare(y.ID[:], x.ID[:])
		}), "newest first, then by id")

		var (
			paged  []inapp.Notification
			before inapp.Cursor
			pages  int
		)
		for {
			page, err := b.inapp.List(t.Context(), "alice", &inapp.ListOpts{Limit: 2, Before: before})
			require.NoError(t, err)
			pages++
			paged = append(paged, page...)
			if len(page) < 2 {
				break
			}
			// Through text, as a cursor travels to the next request.
			text, err := page[len(page)-1].Cursor().MarshalText()
			require.NoError(t, err)
			require.NoError(t, before.UnmarshalText(text))
		}
		require.Equal(t, 3, pages)
		require.Equal(t, ids(all), ids(paged))
	})

	t.Run("BeforeATime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.seed(t, "alice", minutes(1), minutes(2), minutes(2), minutes(3))
		list, err := b.inapp.List(t.Context(), "alice", &inapp.ListOpts{Before: inapp.Cursor{CreatedAt: minutes(2)}})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{alice[0]}, ids(list), "created strictly before")
	})

	t.Run("CursorOutOfRange", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "alice", minutes(1))
		for _, at := range []time.Time{
			time.UnixMicro(math.MinInt64), time.UnixMicro(math.MaxInt64),
			time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			_, err := b.inapp.List(t.Context(), "alice", &inapp.ListOpts{Before: inapp.Cursor{CreatedAt: at}})
			require.ErrorIs(t, err, inapp.ErrInvalid, "a cursor at %v", at)
			require.ErrorContains(t, err, "ListOpts.Before")
		}
	})

	t.Run("EmptyRecipient", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.inapp.List(t.Context(), "", nil)
		require.ErrorIs(t, err, inapp.ErrInvalid)
	})
}

func TestCursorText(t *testing.T) {
	t.Parallel()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		c := inapp.Cursor{CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC), ID: uuid.Must(uuid.NewV7())}
		text, err := c.MarshalText()
		require.NoError(t, err)
		require.Equal(t, string(text), c.String())
		var got inapp.Cursor
		require.NoError(t, got.UnmarshalText(text))
		require.True(t, c.CreatedAt.Equal(got.CreatedAt))
		require.Equal(t, c.ID, got.ID)
	})

	t.Run("Zero", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, inapp.Cursor{}.String())
		got := inapp.Cursor{CreatedAt: time.Now()}
		require.NoError(t, got.UnmarshalText(nil))
		require.True(t, got.IsZero())
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, text := range []string{
			"x", "12", "12_", "_" + uuid.NewString(), "abc_" + uuid.NewString(), "12_not-a-uuid",
			"-1_" + uuid.NewString(), "253402300800000000_" + uuid.NewString(), // 1969, the year 10000
		} {
			var c inapp.Cursor
			require.ErrorIs(t, c.UnmarshalText([]byte(text)), inapp.ErrInvalid, text)
		}
	})
}

func TestUnreadCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.seed(t, "alice", minutes(1), minutes(2), minutes(3))
	b.seed(t, "bob", minutes(1))

	n, err := b.inapp.UnreadCount(t.Context(), "alice")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = b.inapp.MarkRead(t.Context(), "alice", alice[0])
	require.NoError(t, err)
	n, err = b.inapp.UnreadCount(t.Context(), "alice")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = b.inapp.UnreadCount(t.Context(), "carol")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = b.inapp.UnreadCount(t.Context(), "")
	require.ErrorIs(t, err, inapp.ErrInvalid)
}

func TestMarkRead(t *testing.T) {
	t.Parallel()

	t.Run("OnlyTheRecipientsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.seed(t, "alice", minutes(1), minutes(2), minutes(3))
		bob := b.seed(t, "bob", minutes(1))

		n, err := b.inapp.MarkRead(t.Context(), "alice", alice[0], alice[1], bob[0], uuid.New())
		require.NoError(t, err)
		require.Equal(t, int64(2), n, "bob's and the unknown id are not counted")

		bobs, err := b.inapp.List(t.Context(), "bob", nil)
		require.NoError(t, err)
		require.False(t, bobs[0].Read(), "bob's is untouched")
		count, err := b.inapp.UnreadCount(t.Context(), "bob")
		require.NoError(t, err)
		require.Equal(t, 1, count)
		count, err = b.inapp.UnreadCount(t.Context(), "alice")
		require.NoError(t, err)
		require.Equal(t, 1, count)

		// Bob cannot mark alice's either.
		n, err = b.inapp.MarkRead(t.Context(), "bob", alice[2])
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("AgainKeepsTheFirstReadTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.seed(t, "alice", minutes(1))
		n, err := b.inapp.MarkRead(t.Context(), "alice", alice[0])
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		first, err := b.inapp.List(t.Context(), "alice", nil)
		require.NoError(t, err)

		n, err = b.inapp.MarkRead(t.Context(), "alice", alice[0], alice[0])
		require.NoError(t, err)
		require.Zero(t, n, "already read")
		again, err := b.inapp.List(t.Context(), "alice", nil)
		require.NoError(t, err)
		require.True(t, first[0].ReadAt.Equal(again[0].ReadAt))
	})

	t.Run("NoIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "alice", minutes(1))
		n, err := b.inapp.MarkRead(t.Context(), "alice")
		require.NoError(t, err)
		require.Zero(t, n)
		count, err := b.inapp.UnreadCount(t.Context(), "alice")
		require.NoError(t, err)
		require.Equal(t, 1, count)
	})

	t.Run("EmptyRecipient", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.seed(t, "alice", minutes(1))
		_, err := b.inapp.MarkRead(t.Context(), "", alice[0])
		require.ErrorIs(t, err, inapp.ErrInvalid)
	})
}

func TestMarkAllRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.seed(t, "alice", minutes(1), minutes(2), minutes(3))
	b.seed(t, "bob", minutes(1), minutes(2))
	_, err := b.inapp.MarkRead(t.Context(), "alice", alice[0])
	require.NoError(t, err)

	n, err := b.inapp.MarkAllRead(t.Context(), "alice")
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "the unread ones")
	count, err := b.inapp.UnreadCount(t.Context(), "alice")
	require.NoError(t, err)
	require.Zero(t, count)
	n, err = b.inapp.MarkAllRead(t.Context(), "alice")
	require.NoError(t, err)
	require.Zero(t, n)

	count, err = b.inapp.UnreadCount(t.Context(), "bob")
	require.NoError(t, err)
	require.Equal(t, 2, count, "bob's are untouched")
	_, err = b.inapp.MarkAllRead(t.Context(), "")
	require.ErrorIs(t, err, inapp.ErrInvalid)
}
