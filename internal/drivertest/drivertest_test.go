package drivertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/drivertest"
	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// For names the driver Run gives, however many times Run runs under one
// parent: a pgx subtest that quietly ran on lib/pq would prove nothing
// about pgx.
func TestForAgreesWithRun(t *testing.T) {
	for range 2 { // the second time, the subtests are "pq#01" and "pgx#01"
		drivertest.Run(t, func(t *testing.T, d drivertest.Driver) {
			require.Equal(t, d, drivertest.For(t), "subtest %s", t.Name())
			t.Run("Deeper", func(t *testing.T) {
				require.Equal(t, d, drivertest.For(t), "subtest %s", t.Name())
			})
		})
	}
}

// A pool whose *sql.DB has used every connection still begins its own
// transactions and runs its own statements: on pgx, both take their
// connection from the pgxpool the *sql.DB draws on.
func TestPoolServesEveryUse(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, d drivertest.Driver) {
		const conns = 2
		db := d.Open(t, pgtest.URL(t), conns)
		for range 2 {
			var held []func() error
			for range conns {
				c, err := db.Conn(t.Context())
				require.NoError(t, err)
				require.NoError(t, c.PingContext(t.Context()))
				held = append(held, c.Close)
			}
			for _, release := range held {
				require.NoError(t, release())
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			err := db.InTx(ctx, func(tx dbtx.Execer) error {
				_, err := tx.ExecContext(ctx, `SELECT 1`)
				return err
			})
			require.NoError(t, err, "a transaction after the *sql.DB used every connection")
			_, err = db.Execer().ExecContext(ctx, `SELECT 1`)
			require.NoError(t, err, "a statement after the *sql.DB used every connection")
			cancel()
		}
	})
}
