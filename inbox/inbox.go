package inbox

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/migrate"
	"github.com/tidings-go/tidings/internal/pgarray"
	"github.com/tidings-go/tidings/internal/purge"
)

// PurgeBatchDefault is how many claims one purge statement deletes.
const PurgeBatchDefault = 1000

// ErrInvalid marks a claim or purge whose arguments are wrong; the error
// names the argument.
var ErrInvalid = errors.New("inbox: invalid argument")

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the inbox's SQL migrations, named as golang-migrate
// expects. The files name no schema: run them with search_path set to it.
func Migrations() fs.FS { return migrate.Dir(migrationFiles) }

// Migrate creates or updates the inbox table in schema ("" means
// "tidings"). It is safe to run from many processes at once.
func Migrate(ctx context.Context, db *sql.DB, schema string) error {
	return migrate.Apply(ctx, db, cmp.Or(schema, ident.SchemaDefault), migrate.Set{Component: "inbox", FS: Migrations()})
}

// Inbox is the inbox table of one schema. It is safe for concurrent use.
type Inbox struct {
	once, onceBatch, release, claimed string
	purge                             string
}

// New returns the inbox of schema ("" means "tidings"). The name must
// be a lower-case identifier of at most 56 bytes, as every schema of the
// library's.
func New(schema string) (*Inbox, error) {
	if schema == "" {
		schema = ident.SchemaDefault
	}
	if err := ident.CheckSchema("schema", schema); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	table := ident.Quote(schema) + ".inbox"
	return &Inbox{
		once: `INSERT INTO ` + table + ` (consumer, event_id) VALUES ($1, $2)
			ON CONFLICT (consumer, event_id) DO NOTHING`,
		// Claims are inserted in id order, so two transactions claiming
		// overlapping sets wait for each other instead of deadlocking.
		onceBatch: `INSERT INTO ` + table + ` (consumer, event_id)
			SELECT $1, id FROM unnest($2::uuid[]) AS ids(id) ORDER BY id
			ON CONFLICT (consumer, event_id) DO NOTHING
			RETURNING event_id`,
		release: `DELETE FROM ` + table + ` WHERE consumer = $1 AND event_id = ANY($2::uuid[])`,
		claimed: `SELECT event_id FROM ` + table + ` WHERE consumer = $1 AND event_id = ANY($2::uuid[])`,
		purge: `DELETE FROM ` + table + ` i USING (
				SELECT consumer, event_id FROM ` + table + `
				WHERE consumer = $3 AND claimed_at < now() - make_interval(secs => $1)
				LIMIT $2 FOR UPDATE SKIP LOCKED) old
			WHERE i.consumer = old.consumer AND i.event_id = old.event_id`,
	}, nil
}

var defaultInbox, _ = New("")

// Once claims (consumer, eventID) in the default schema's inbox; see
// [Inbox.Once].
func Once(ctx context.Context, tx dbtx.Execer, consumer string, eventID uuid.UUID) (bool, error) {
	return defaultInbox.Once(ctx, tx, consumer, eventID)
}

// Once claims (consumer, eventID) inside tx and reports whether this is the
// first claim: true means act now and commit; false means a committed
// transaction already claimed it. When another open transaction holds the
// same claim, Once waits for it to end. consumer must be a lower-case
// identifier (see the package relay's naming rules), so it is safe in
// metrics and logs.
func (ib *Inbox) Once(ctx context.Context, tx dbtx.Execer, consumer string, eventID uuid.UUID) (bool, error) {
	if err := ident.Check("consumer", consumer); err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if eventID == uuid.Nil {
		return false, fmt.Errorf("%w: event id is the nil UUID", ErrInvalid)
	}
	// The id as text: pgx encodes a uuid.UUID through its driver.Valuer
	// only after a plan that fails, building an error each time (twice
	// the allocations of the statement); both drivers send a string as is.
	res, err := tx.ExecContext(ctx, ib.once, consumer, eventID.String())
	if err != nil {
		return false, fmt.Errorf("inbox: claim: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: claim: %w", err)
	}
	return n == 1, nil
}

// OnceBatch claims every id of eventIDs for consumer inside tx, in one
// statement, and returns the ids claimed for the first time; the others
// were claimed by a committed transaction. Like Once, it waits for open
// transactions that hold any of the same claims, and refuses a consumer
// that is no identifier and a nil id with ErrInvalid; so do Claimed and
// Release.
func (ib *Inbox) OnceBatch(ctx context.Context, tx dbtx.Queryer, consumer string, eventIDs []uuid.UUID) (map[uuid.UUID]bool, error) {
	return ib.ids(ctx, tx, ib.onceBatch, "claim batch", consumer, eventIDs)
}

// Claimed returns those of eventIDs that consumer's committed claims hold,
// as q sees them, without claiming any: for a caller that must tell an
// effect that happened at an earlier delivery before it decides another
// outcome. A claim an open transaction holds is not seen.
func (ib *Inbox) Claimed(ctx context.Context, q dbtx.Queryer, consumer string, eventIDs []uuid.UUID) (map[uuid.UUID]bool, error) {
	return ib.ids(ctx, q, ib.claimed, "read claims", consumer, eventIDs)
}

// ids runs query, one of consumer's statements over eventIDs, and returns
// the event ids it gave; what names it in an error.
func (ib *Inbox) ids(ctx context.Context, q dbtx.Queryer, query, what, consumer string, eventIDs []uuid.UUID) (map[uuid.UUID]bool, error) {
	ids, err := args(consumer, eventIDs)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, query, consumer, pgarray.Of(ids))
	if err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", what, err)
	}
	defer rows.Close()
	got := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("inbox: %s: %w", what, err)
		}
		got[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", what, err)
	}
	return got, nil
}

// Release removes consumer's claims of eventIDs inside tx, the transaction
// that took them: the effects they guarded did not happen after all.
func (ib *Inbox) Release(ctx context.Context, tx dbtx.Execer, consumer string, eventIDs []uuid.UUID) error {
	ids, err := args(consumer, eventIDs)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, ib.release, consumer, pgarray.Of(ids)); err != nil {
		return fmt.Errorf("inbox: release: %w", err)
	}
	return nil
}

// args checks consumer and eventIDs as Once does, and returns the ids as
// text, as both drivers send them.
func args(consumer string, eventIDs []uuid.UUID) ([]string, error) {
	if err := ident.Check("consumer", consumer); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s := make([]string, len(eventIDs))
	for i, id := range eventIDs {
		if id == uuid.Nil {
			return nil, fmt.Errorf("%w: event id %d of %d is the nil UUID", ErrInvalid, i+1, len(eventIDs))
		}
		s[i] = id.String()
	}
	return s, nil
}

// Purge deletes consumer's claims older than olderThan, PurgeBatchDefault
// at a time, until none is left, and returns how many it deleted. Other
// consumers' claims are left alone: each knows how long its own events
// can be redelivered. olderThan must be positive: a claim purged while its
// event can still be redelivered lets the effect happen twice.
func (ib *Inbox) Purge(ctx context.Context, db *sql.DB, consumer string, olderThan time.Duration) (int64, error) {
	if err := ident.Check("consumer", consumer); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: purge age %s is not positive", ErrInvalid, olderThan)
	}
	n, err := purge.Batches(ctx, db, ib.purge, olderThan, PurgeBatchDefault, consumer)
	if err != nil {
		return n, fmt.Errorf("inbox: purge: %w", err)
	}
	return n, nil
}
