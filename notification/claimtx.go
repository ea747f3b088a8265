package notification

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/tidings-go/tidings/dbtx"
)

// claimTx is a claim's transaction on a connection of its own. Its BEGIN
// waits for the first statement, its last writes for its COMMIT, so that
// a Pipeline sends each pair in one round trip: of the five round trips
// of a claim at a steady rate, BEGIN and the settle were two
// (BENCHMARKS.md). Without a Pipeline each goes alone, as a *sql.Tx sends
// them. It is a delivery.Tx for the deliveries that write in it.
//
// Without a Pipeline, a COMMIT of a failed transaction answers ROLLBACK
// and no error, so the dispatcher commits none: a delivery's failed
// statement is taken back by its savepoint, a savepoint it cannot take
// back or release is a request not delivered, and a transaction with one
// of those commits only after writes queued for the COMMIT (its release),
// which fail in a failed transaction.
type claimTx struct {
	conn *sql.Conn
	pipe dbtx.Pipeline
	// pending is what the next round trip sends first: BEGIN, until the
	// first statement; then the writes queued for the COMMIT.
	pending []dbtx.Statement
	begun   bool // BEGIN was sent
	ended   bool // COMMIT answered
	// stop stops the close of the connection at the context's end.
	stop func() bool
}

// beginClause is the claim's isolation, whatever the server's default:
// under read committed a claim that waited for another's commit sees it
// (and answers "already claimed") instead of failing to serialize.
const beginClause = `BEGIN ISOLATION LEVEL READ COMMITTED`

// rollbackTimeout bounds the ROLLBACK of a transaction that did not
// commit; a connection whose ROLLBACK fails is closed, not pooled.
const rollbackTimeout = 5 * time.Second

// beginClaim takes a connection of db for a claim's transaction. Nothing is
// sent yet: BEGIN goes with the first statement. When ctx ends before the
// transaction does, the connection is closed, which rolls the
// transaction back at once, as database/sql does with a *sql.Tx: a
// delivery that ignores its context must not keep the claim locked
// beyond its deadline, for the next hand waits on that lock. Every
// statement after that fails.
func beginClaim(ctx context.Context, db *sql.DB, pipe dbtx.Pipeline) (*claimTx, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	t := &claimTx{conn: conn, pipe: pipe, pending: []dbtx.Statement{{Query: beginClause}}}
	t.stop = context.AfterFunc(ctx, t.discard)
	return t, nil
}

// discard closes the connection instead of giving it back to the pool:
// the server rolls back what it had open.
func (t *claimTx) discard() { _ = t.conn.Raw(func(any) error { return driver.ErrBadConn }) }

// checkPipeline sends a statement through pipe on a connection of db: a
// Pipeline of another driver's fails here, at start, and not at every
// claim.
func checkPipeline(ctx context.Context, db *sql.DB, pipe dbtx.Pipeline) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(c any) error { return pipe(ctx, c, []dbtx.Statement{{Query: `SELECT`}}) })
}

// send runs stmts after what is pending, in one round trip with a
// Pipeline and else one by one.
func (t *claimTx) send(ctx context.Context, stmts ...dbtx.Statement) error {
	all := append(t.pending, stmts...)
	t.pending, t.begun = nil, true
	if t.pipe != nil {
		return t.conn.Raw(func(c any) error { return t.pipe(ctx, c, all) })
	}
	for _, st := range all {
		if err := t.one(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

// one runs st alone on the transaction's connection.
func (t *claimTx) one(ctx context.Context, st dbtx.Statement) error {
	if st.Rows == nil {
		_, err := t.conn.ExecContext(ctx, st.Query, st.Args...)
		return err
	}
	rows, err := t.conn.QueryContext(ctx, st.Query, st.Args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := st.Rows(rows); err != nil {
		return err
	}
	return rows.Err()
}

// query runs a statement that returns rows, read by read. The claim's
// first statement is one: it goes with BEGIN.
func (t *claimTx) query(ctx context.Context, read func(dbtx.Rows) error, query string, args ...any) error {
	return t.send(ctx, dbtx.Statement{Query: query, Args: args, Rows: read})
}

// ExecContext runs a statement in the transaction now. It and the two
// below come after the first statement (query), and before the writes
// queued for the COMMIT (later).
func (t *claimTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.conn.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction now.
func (t *claimTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.conn.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query of one row in the transaction now.
func (t *claimTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.conn.QueryRowContext(ctx, query, args...)
}

// later is an Execer whose statements wait for the COMMIT, sent in its
// round trip: their errors are its error. Their results are unknown
// until then.
func (t *claimTx) later() dbtx.Execer { return queued{t} }

type queued struct{ t *claimTx }

func (q queued) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	q.t.pending = append(q.t.pending, dbtx.Statement{Query: query, Args: args})
	return notYet{}, nil
}

// notYet is the result of a statement that waits for the COMMIT.
type notYet struct{}

var errNotYet = errors.New("a statement sent with the COMMIT has no result before it")

func (notYet) LastInsertId() (int64, error) { return 0, errNotYet }
func (notYet) RowsAffected() (int64, error) { return 0, errNotYet }

// commit sends the queued writes and COMMIT, and ends the transaction
// whether it committed or not.
func (t *claimTx) commit(ctx context.Context) error {
	err := t.send(ctx, dbtx.Statement{Query: `COMMIT`})
	if err != nil {
		return fmt.Errorf("commit the claim's transaction: %w", err)
	}
	t.ended = true
	return nil
}

// end rolls back a transaction that began and did not commit, and gives
// the connection back: to the pool, or closed if the ROLLBACK failed, so
// that no connection goes back inside a transaction.
func (t *claimTx) end() {
	if t.stop() && t.begun && !t.ended {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		defer cancel()
		if _, err := t.conn.ExecContext(ctx, `ROLLBACK`); err != nil {
			t.discard()
		}
	}
	// After a discard, this returns sql.ErrConnDone.
	_ = t.conn.Close()
}
