package delivery

import (
	"context"
	"database/sql"
)

// Tx is the transaction that holds a request's claim, as a delivery
// writes through it: it runs statements (a dbtx.Execer and a
// dbtx.Queryer), and only the dispatcher commits it or rolls it back.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type txKey struct{}

// WithTx returns ctx carrying tx, the transaction that holds the request's
// claim. The dispatcher calls a [RepeatImpossible] delivery with it.
func WithTx(ctx context.Context, tx Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFrom returns the transaction that holds the request's claim. The
// dispatcher gives it to deliveries that declare [RepeatImpossible], and
// only to them, whether the request has a transaction of its own or
// shares one with the other requests of its batch and channel: a delivery
// sees the same either way. It writes through tx, so its write commits
// with the claim or not at all. In a shared transaction the dispatcher
// runs such deliveries one at a time, each inside a savepoint, so one that
// fails takes back only its own writes.
func TxFrom(ctx context.Context) (Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(Tx)
	return tx, ok && tx != nil
}
