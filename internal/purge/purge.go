// Package purge deletes old rows in small batches, so a purge never holds
// many row locks or one long transaction.
package purge

import (
	"context"
	"database/sql"
	"time"
)

// Batches runs query, a DELETE of at most $2 rows older than $1 seconds,
// until it deletes fewer than batch rows, and returns how many it deleted.
func Batches(ctx context.Context, db *sql.DB, query string, olderThan time.Duration, batch int) (int64, error) {
	var total int64
	for {
		res, err := db.ExecContext(ctx, query, olderThan.Seconds(), batch)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
