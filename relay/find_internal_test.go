package relay

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

// TestFindByCorrelationReadsThroughIndexes checks the plan of the
// statement: with sequential scans priced out, both of its branches read
// through an index (a plan without one would still scan, at a cost that
// forbids it elsewhere).
func TestFindByCorrelationReadsThroughIndexes(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, Migrate)
	o, err := NewOutbox(&OutboxConfig{Schema: schema})
	require.NoError(t, err)
	tx := pgtest.Tx(t)
	_, err = tx.ExecContext(t.Context(), `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	rows, err := tx.QueryContext(t.Context(), `EXPLAIN `+o.q.byCorrelation, "order-7", uuid.New(), "", FindLimitDefault)
	require.NoError(t, err)
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	require.NotContains(t, plan.String(), "Seq Scan")
	require.Contains(t, plan.String(), "outbox_correlation")
	require.Contains(t, plan.String(), "outbox_pkey")
}
