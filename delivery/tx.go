package delivery

import (
	"context"
	"database/sql"
)

type txKey struct{}

// WithTx returns ctx carrying tx, the transaction that holds the request's
// claim. The dispatcher calls a [RepeatImpossible] delivery with it.
func WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFrom returns the transaction that holds the request's claim. The
// dispatcher gives it to deliveries that declare [RepeatImpossible], and
// only to them, whether the request has a transaction of its own or
// shares one with the other requests of its batch and channel: a delivery
// sees the same either way. It writes through tx, so its write commits
// with the claim or not at all, and it must neither commit nor roll back
// tx. In a shared transaction the dispatcher runs such deliveries one at a
// time, each inside a savepoint, so one that fails takes back only its own
// writes.
func TxFrom(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok && tx != nil
}
