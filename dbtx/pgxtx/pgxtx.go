// Package pgxtx makes a pgx v5 transaction, connection or pool a
// dbtx.Execer, so that a pgx service stages in its own write transaction:
//
//	tx, err := pool.Begin(ctx)
//	...
//	id, err := client.Stage(ctx, pgxtx.Wrap(tx), "bookings", req)
//	...
//	err = tx.Commit(ctx)
//
// The statements, their validation, the ids, the headers and the wake-up
// at commit are those of database/sql staging: only the call differs.
//
// Pipeline sends the statements of the dispatcher's transactions in pgx's
// batches, a round trip or two fewer per transaction: give it to the
// relay as its Config's Pipeline. It is a package of its own so that the
// library's other packages never import pgx, and lib/pq users never
// download it.
package pgxtx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tidings-go/tidings/dbtx"
)

// ErrNoLastInsertID is what the Result of an Exec answers to
// LastInsertId: PostgreSQL has none (use RETURNING).
var ErrNoLastInsertID = errors.New("pgxtx: PostgreSQL has no LastInsertId")

// Execer is what pgx.Tx, *pgx.Conn, *pgxpool.Pool, *pgxpool.Conn and
// *pgxpool.Tx have in common.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Wrap returns e as a dbtx.Execer: its ExecContext runs Exec. What it runs
// commits with e's transaction (a pgx.Tx), or at once (a connection or a
// pool: staging outside a transaction). The wrapper holds nothing else and
// is as safe for concurrent use as e; a nil e, or a nil pointer such as a
// nil *pgx.Conn, is nil, so that staging answers it as an invalid
// argument.
func Wrap(e Execer) dbtx.Execer {
	if v := reflect.ValueOf(e); e == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return execer{e}
}

type execer struct{ e Execer }

func (x execer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := x.e.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return result(tag), nil
}

// result is a command tag as a sql.Result.
type result pgconn.CommandTag

func (r result) LastInsertId() (int64, error) { return 0, ErrNoLastInsertID }

func (r result) RowsAffected() (int64, error) { return pgconn.CommandTag(r).RowsAffected(), nil }

// Pipeline is a dbtx.Pipeline for a *sql.DB of pgx's (stdlib.OpenDB,
// stdlib.OpenDBFromPool): it sends the statements as one pgx batch, in
// one round trip. Give it to the relay as its Config's Pipeline.
func Pipeline(ctx context.Context, conn any, stmts []dbtx.Statement) error {
	c, ok := conn.(*stdlib.Conn)
	if !ok {
		return fmt.Errorf("pgxtx: a pipeline needs a connection of pgx's stdlib, not a %T", conn)
	}
	for i, st := range stmts[:max(len(stmts)-1, 0)] {
		if st.Rows != nil {
			return fmt.Errorf("pgxtx: statement %d of %d reads rows, but only the last may: the server runs those after it before it is read", i+1, len(stmts))
		}
	}
	b := &pgx.Batch{}
	for _, st := range stmts {
		q := b.Queue(st.Query, st.Args...)
		if st.Rows != nil {
			q.Query(func(rows pgx.Rows) error { return st.Rows(rows) })
			continue
		}
		q.Exec(func(tag pgconn.CommandTag) error {
			// A COMMIT of a failed transaction is answered ROLLBACK.
			if tag.String() == "ROLLBACK" && !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(st.Query)), "ROLLBACK") {
				return ErrRolledBack
			}
			return nil
		})
	}
	return c.Conn().SendBatch(ctx, b).Close()
}

// ErrRolledBack is a Pipeline's error for a COMMIT the server answered
// with ROLLBACK: its transaction had failed, and nothing of it committed.
var ErrRolledBack = errors.New("pgxtx: the transaction had failed: COMMIT rolled it back")
