// Package pgxtx makes a pgx v5 transaction, connection or pool a
// dbtx.Execer, so that a pgx service stages in its own write transaction:
//
//	tx, err := pool.Begin(ctx)
//	...
//	id, err := client.Stage(ctx, pgxtx.Wrap(tx), req)
//	...
//	err = tx.Commit(ctx)
//
// The statements, their validation, the ids, the headers and the wake-up
// at commit are those of database/sql staging: only the call differs. It is
// a package of its own so that the library's other packages never import
// pgx, and lib/pq users never download it.
package pgxtx

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

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
// is as safe for concurrent use as e; a nil e stays nil, so that staging
// answers it as an invalid argument.
func Wrap(e Execer) dbtx.Execer {
	if e == nil {
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
