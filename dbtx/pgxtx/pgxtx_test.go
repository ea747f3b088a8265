package pgxtx_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/dbtx/pgxtx"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/relay"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// conn is a connection of a pool of d's with a temporary table t of one
// column.
func conn(t *testing.T, d drivertest.Driver) *sql.Conn {
	t.Helper()
	c, err := d.Open(t, pgtest.URL(t), 1).Conn(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.ExecContext(t.Context(), `CREATE TEMPORARY TABLE t (n int)`)
	require.NoError(t, err)
	return c
}

func pipe(ctx context.Context, c *sql.Conn, stmts ...dbtx.Statement) error {
	return c.Raw(func(dc any) error { return pgxtx.Pipeline(ctx, dc, stmts) })
}

// A nil pgx handle is nil wrapped too, so that staging answers it as an
// invalid argument instead of crashing on it.
func TestWrapOfANilHandleIsNil(t *testing.T) {
	t.Parallel()
	for _, e := range []pgxtx.Execer{nil, (*pgx.Conn)(nil), (*pgxpool.Pool)(nil), (*pgxpool.Conn)(nil)} {
		require.Nil(t, pgxtx.Wrap(e), "%T", e)
		_, err := relay.Stage(t.Context(), pgxtx.Wrap(e), relay.Message{Module: "orders", Kind: "k", Payload: []byte(`{}`)})
		require.ErrorIs(t, err, relay.ErrInvalidMessage, "%T", e)
	}
}

// count is the number of rows of t.
func count(t *testing.T, c *sql.Conn) int {
	t.Helper()
	var n int
	require.NoError(t, c.QueryRowContext(t.Context(), `SELECT count(*) FROM t`).Scan(&n))
	return n
}

func TestPipeline(t *testing.T) {
	t.Parallel()

	t.Run("RunsTheStatementsInOrderAndReadsTheirRows", func(t *testing.T) {
		t.Parallel()
		c := conn(t, drivertest.PGX)
		var got []int
		require.NoError(t, pipe(t.Context(), c,
			dbtx.Statement{Query: `BEGIN`},
			dbtx.Statement{Query: `INSERT INTO t VALUES ($1), ($2)`, Args: []any{1, 2}},
			dbtx.Statement{Query: `SELECT n FROM t ORDER BY n`, Rows: func(rows dbtx.Rows) error {
				for rows.Next() {
					var n int
					if err := rows.Scan(&n); err != nil {
						return err
					}
					got = append(got, n)
				}
				return rows.Err()
			}}))
		require.Equal(t, []int{1, 2}, got, "the SELECT sees the INSERT before it")
		require.NoError(t, pipe(t.Context(), c, dbtx.Statement{Query: `INSERT INTO t VALUES (3)`}, dbtx.Statement{Query: `COMMIT`}))
		require.Equal(t, 3, count(t, c))
	})

	t.Run("AFailedStatementFailsThoseAfterIt", func(t *testing.T) {
		t.Parallel()
		c := conn(t, drivertest.PGX)
		err := pipe(t.Context(), c, dbtx.Statement{Query: `BEGIN`},
			dbtx.Statement{Query: `SELECT 1 / 0`}, dbtx.Statement{Query: `INSERT INTO t VALUES (1)`}, dbtx.Statement{Query: `COMMIT`})
		require.ErrorContains(t, err, "division by zero")
		_, err = c.ExecContext(t.Context(), `ROLLBACK`)
		require.NoError(t, err)
		require.Zero(t, count(t, c), "nothing after the failed statement ran")
	})

	t.Run("ACommitOfAFailedTransactionIsAnError", func(t *testing.T) {
		t.Parallel()
		c := conn(t, drivertest.PGX)
		require.NoError(t, pipe(t.Context(), c, dbtx.Statement{Query: `BEGIN`}, dbtx.Statement{Query: `INSERT INTO t VALUES (1)`}))
		_, err := c.ExecContext(t.Context(), `SELECT 1 / 0`)
		require.Error(t, err)
		require.ErrorIs(t, pipe(t.Context(), c, dbtx.Statement{Query: `COMMIT`}), pgxtx.ErrRolledBack)
		require.Zero(t, count(t, c), "the transaction rolled back")
	})

	// The server runs the whole batch before a reader reads: a reader's
	// error could not keep a COMMIT after it from committing.
	t.Run("OnlyTheLastStatementReadsRows", func(t *testing.T) {
		t.Parallel()
		c := conn(t, drivertest.PGX)
		err := pipe(t.Context(), c, dbtx.Statement{Query: `BEGIN`},
			dbtx.Statement{Query: `SELECT 1`, Rows: func(dbtx.Rows) error { return nil }},
			dbtx.Statement{Query: `INSERT INTO t VALUES (1)`}, dbtx.Statement{Query: `COMMIT`})
		require.ErrorContains(t, err, "statement 2 of 4 reads rows, but only the last may")
		require.Zero(t, count(t, c), "nothing was sent")
	})

	t.Run("NeedsAConnectionOfPgx", func(t *testing.T) {
		t.Parallel()
		c := conn(t, drivertest.PQ)
		require.ErrorContains(t, pipe(t.Context(), c, dbtx.Statement{Query: `SELECT`}), "pgx's stdlib")
	})
}
