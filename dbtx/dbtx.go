// Package dbtx names what the library needs of a caller's database handle
// to run its statements there. *sql.DB, *sql.Tx and *sql.Conn have both
// methods, and so do wrappers such as sqlx's. Staging, cancelling, settling
// and an inbox claim take the caller's transaction, so that what they
// write commits with the caller's own writes, or not at all.
package dbtx

import (
	"context"
	"database/sql"
)

// Execer runs statements: what staging, cancelling, settling and an inbox
// claim need.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Queryer runs queries: what reading a status and claiming a batch in the
// inbox need.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
