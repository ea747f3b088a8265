// Package purge deletes old rows in small batches, so a purge never holds
// many row locks or one long transaction.
package purge

import (
	"context"
	"database/sql"
	"time"
)

// Batches runs query, a DELETE of at most $2 rows older than $1 seconds
// (with args from $3 on), until it deletes fewer than batch rows, and
// returns how many it deleted.
func Batches(ctx context.Context, db *sql.DB, query string, olderThan time.Duration, batch int, args ...any) (int64, error) {
	args = append([]any{olderThan.Seconds(), batch}, args...)
	var total int64
	for {
		res, err := db.ExecContext(ctx, query, args...)
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
