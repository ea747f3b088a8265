package delivery

import (
	"context"
	"database/sql"
)

type txKey struct{}

// WithTx returns ctx carrying tx, the transaction that holds the request's
// claim. The dispatcher calls the delivery with it.
func WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFrom returns the transaction that holds the request's claim, if the
// delivery runs inside one. A delivery that writes to the same database
// (an in-app inbox, say) writes through it: its write commits with the
// claim, or not at all, so the request takes effect exactly once. The
// delivery must not commit or roll it back. There is none when the
// dispatcher commits claims in groups (notification.Config.GroupSize): a
// delivery then writes on its own, keyed by the request's id so that a
// repeat changes nothing.
func TxFrom(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok && tx != nil
}
