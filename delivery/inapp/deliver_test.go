package inapp_test

import (
	"context"
	"io/fs"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestDeliver(t *testing.T) {
	t.Parallel()

	t.Run("OutsideADispatcherTwiceWritesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := pending("user-1", map[string]any{"k": "v"})
		for range 2 {
			out := b.inapp.Deliver(t.Context(), p)
			require.Equal(t, delivery.KindDelivered, out.Kind(), out.String())
			require.Equal(t, p.ID.String(), out.Reference())
		}
		require.Equal(t, 1, b.rows(t, p.ID))
	})

	t.Run("ConcurrentlyWritesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := pending("user-1", nil)
		outs := make([]delivery.Outcome, 8)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Go(func() { outs[i] = b.inapp.Deliver(t.Context(), p) })
		}
		wg.Wait()
		for _, out := range outs {
			require.Equal(t, delivery.KindDelivered, out.Kind(), out.String())
		}
		require.Equal(t, 1, b.rows(t, p.ID))
	})

	t.Run("WritesThroughTheTransactionInContext", func(t *testing.T) {
		t.Parallel()
		for _, commit := range []bool{false, true} {
			name := "RolledBack"
			if commit {
				name = "Committed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				tx, err := b.db.BeginTx(t.Context(), nil)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback() }()
				p := pending("user-1", nil)
				out := b.inapp.Deliver(delivery.WithTx(t.Context(), tx), p)
				require.Equal(t, delivery.KindDelivered, out.Kind(), out.String())
				require.Equal(t, 0, b.rows(t, p.ID), "not committed yet")
				if commit {
					require.NoError(t, tx.Commit())
					require.Equal(t, 1, b.rows(t, p.ID))
				} else {
					require.NoError(t, tx.Rollback())
					require.Equal(t, 0, b.rows(t, p.ID))
				}
			})
		}
	})

	t.Run("NoDataListsAsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := pending("user-1", nil)
		require.Equal(t, delivery.KindDelivered, b.inapp.Deliver(t.Context(), p).Kind())
		list, err := b.inapp.List(t.Context(), "user-1", nil)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, map[string]any{}, list[0].Data)
	})

	t.Run("EmptyRecipientIsRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := pending("", nil)
		out := b.inapp.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindReject, out.Kind())
		require.ErrorIs(t, out.Reason(), inapp.ErrNoRecipient)
		require.Equal(t, 0, b.rows(t, p.ID))
	})

	t.Run("UnstorableValuesAreRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for name, p := range map[string]delivery.Pending{
			"NULInTemplate":   func() delivery.Pending { p := pending("secret-user", nil); p.Template = "a\x00b"; return p }(),
			"NULInData":       pending("secret-user", map[string]any{"k": "secret\x00value"}),
			"BadUTF8Template": func() delivery.Pending { p := pending("secret-user", nil); p.Template = "\xff\xfe"; return p }(),
			"NaNInData":       pending("secret-user", map[string]any{"k": math.NaN()}),
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				out := b.inapp.Deliver(t.Context(), p)
				require.Equal(t, delivery.KindReject, out.Kind(), out.String())
				require.ErrorIs(t, out.Reason(), inapp.ErrUnstorable)
				require.NotContains(t, out.Reason().Error(), "secret")
				require.Equal(t, 0, b.rows(t, p.ID))
			})
		}
	})

	t.Run("CancelledContextRetries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		p := pending("user-1", nil)
		out := b.inapp.Deliver(ctx, p)
		require.Equal(t, delivery.KindRetry, out.Kind())
		require.ErrorIs(t, out.Reason(), context.Canceled)
		require.Equal(t, 0, b.rows(t, p.ID))
	})

	t.Run("DatabaseErrorRetriesWithoutPersonalData", func(t *testing.T) {
		t.Parallel()
		// A valid schema nobody migrated: the insert fails.
		d, err := inapp.New(&inapp.Config{DB: pgtest.DB(t), Schema: "inapp_not_migrated"})
		require.NoError(t, err)
		p := pending("secret-user", map[string]any{"k": "secret-value"})
		out := d.Deliver(t.Context(), p)
		require.Equal(t, delivery.KindRetry, out.Kind(), out.String())
		require.NotContains(t, out.Reason().Error(), "secret")
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)

	t.Run("DefaultSchema", func(t *testing.T) {
		t.Parallel()
		d, err := inapp.New(&inapp.Config{DB: db})
		require.NoError(t, err)
		require.NotNil(t, d)
	})

	t.Run("NilDB", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []*inapp.Config{nil, {Schema: "tidings"}} {
			_, err := inapp.New(cfg)
			require.ErrorIs(t, err, inapp.ErrInvalid)
			require.ErrorContains(t, err, "Config.DB")
		}
	})

	t.Run("BadSchemaNames", func(t *testing.T) {
		t.Parallel()
		for _, schema := range []string{"Tidings", "a-b", "1abc", "a b", `x"; DROP TABLE y; --`, "ünï",
			"a123456789012345678901234567890123456789012345678901234567890123"} {
			t.Run(schema, func(t *testing.T) {
				t.Parallel()
				_, err := inapp.New(&inapp.Config{DB: db, Schema: schema})
				require.ErrorIs(t, err, inapp.ErrInvalid)
				require.ErrorContains(t, err, "Config.Schema")
				require.Error(t, inapp.Migrate(t.Context(), db, schema))
			})
		}
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("TwiceIsANoOp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.deliver(t, "user-1")
		require.NoError(t, inapp.Migrate(t.Context(), pgtest.AdminDB(t), b.schema))
		require.Equal(t, 1, b.rows(t, id), "the table is left alone")
	})

	t.Run("Files", func(t *testing.T) {
		t.Parallel()
		entries, err := fs.ReadDir(inapp.Migrations(), ".")
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.Equal(t, []string{"001_inapp.down.sql", "001_inapp.up.sql"}, names)
		up, err := fs.ReadFile(inapp.Migrations(), "001_inapp.up.sql")
		require.NoError(t, err)
		require.NotContains(t, string(up), "tidings.", "the files name no schema")
	})
}
