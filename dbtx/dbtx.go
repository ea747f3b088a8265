// Package dbtx names what the library needs of a caller's database handle
// to run its statements there. *sql.DB, *sql.Tx and *sql.Conn have both
// methods, and so do wrappers such as sqlx's. Staging, cancelling, settling
// and an inbox claim take the caller's transaction, so that what they
// write commits with the caller's own writes, or not at all. Pipeline is
// what a driver's own package adds: several statements in one round trip.
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

// Statement is one statement of a Pipeline: its query, its arguments, and,
// for a statement that returns rows, what reads them.
type Statement struct {
	Query string
	Args  []any
	// Rows reads the statement's rows, if it returns any; nil runs it for
	// its effect alone. Only a Pipeline's last statement may have it.
	Rows func(Rows) error
}

// Rows are a statement's rows as a Pipeline hands them to Statement.Rows:
// *sql.Rows has these methods, and so have the drivers' own.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// A Pipeline sends stmts on conn, a driver's connection as
// (*sql.Conn).Raw hands it, in one round trip, and reads their results in
// order. A statement that fails fails those after it, unrun, and is the
// error; so is a COMMIT the server answered with ROLLBACK (its
// transaction had failed). Only the last statement may have Rows: the
// server runs every statement before the first reader reads, so a
// reader's error could not keep a later statement from running (a
// COMMIT, say). With one, a transaction sends its BEGIN with its first
// statement and its last writes with its COMMIT: a round trip or two
// fewer. database/sql has no such call: a driver's own package
// provides it (dbtx/pgxtx.Pipeline), and a nil Pipeline sends each
// statement alone.
type Pipeline func(ctx context.Context, conn any, stmts []Statement) error
