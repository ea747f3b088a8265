package inapp

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/migrate"
)

// sqlStateDataException is the class of SQLSTATEs of a value the database
// cannot store (22: data exception).
const sqlStateDataException = "22"

var (
	// ErrInvalid marks a call whose arguments are wrong (a nil db, a schema
	// name that is not an identifier, an empty recipient, a limit out of
	// range); the error names the argument, never a recipient.
	ErrInvalid = errors.New("inapp: invalid argument")

	// ErrNoRecipient is the reason of the Reject that Deliver answers for a
	// request without a recipient.
	ErrNoRecipient = delivery.NewError(delivery.CodeInvalidRecipient, "inapp: the request has no recipient (a user id)")

	// ErrUnstorable is the reason of the Reject that Deliver answers for a
	// request whose template or data cannot be stored: data that does not
	// encode as JSON, text with a NUL character or invalid UTF-8. Trying
	// again would not help.
	ErrUnstorable = delivery.NewError("data.unstorable", "inapp: the request's template or data cannot be stored")
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the in-app table's SQL migrations, named as
// golang-migrate expects. The files name no schema: run them with
// search_path set to it, as a source of their own with its own migrations
// table (x-migrations-table), since they start at version 1 like the
// library's.
func Migrations() fs.FS { return migrate.Dir(migrationFiles) }

// Migrate creates or updates the in-app table in schema ("" means
// "tidings", the library's own). It is separate from tidings.Migrate, which creates the
// outbox and the inbox: call both, in either order. It is safe to run from
// many processes at once, and leaves an up-to-date schema alone.
func Migrate(ctx context.Context, db *sql.DB, schema string) error {
	return migrate.Apply(ctx, db, cmp.Or(schema, ident.SchemaDefault), migrate.Set{Component: "inapp", FS: Migrations()})
}

// Delivery writes notifications into the in-app table of one schema, and
// reads and marks them for the application. It implements
// [delivery.Delivery]; register it with the dispatcher under a channel such
// as "inapp".
//
// A Delivery is safe for concurrent use. It does not own db: the caller
// closes it.
type Delivery struct {
	db *sql.DB
	q  queries
}

var (
	_ delivery.Delivery = (*Delivery)(nil)
	_ delivery.Repeater = (*Delivery)(nil)
)

// Repeats answers delivery.RepeatImpossible: the row is written through the
// claim's transaction, so the dispatcher gives Deliver that transaction
// whether or not the request shares its commit.
func (d *Delivery) Repeats() delivery.Repeat { return delivery.RepeatImpossible }

// Config configures a Delivery.
type Config struct {
	// DB reaches the in-app table: Deliver writes through it when no
	// claim's transaction is given, and the reads and marks of the
	// application go through it. Required.
	DB *sql.DB

	// Schema holds the in-app table: a lower-case identifier of at most 63
	// bytes. Default "tidings", the library's own.
	Schema string
}

// New returns the Delivery cfg describes. It checks cfg and touches no
// database: migrate the schema with [Migrate] first.
func New(cfg *Config) (*Delivery, error) {
	if cfg == nil || cfg.DB == nil {
		return nil, fmt.Errorf("%w: Config.DB is nil", ErrInvalid)
	}
	schema := cmp.Or(cfg.Schema, ident.SchemaDefault)
	if err := ident.CheckSchema("Config.Schema", schema); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Delivery{db: cfg.DB, q: newQueries(schema)}, nil
}

// Deliver writes p into the in-app table as a row of id p.ID for user
// p.Recipient, and answers Delivered with p.ID as its reference.
//
// Inside the dispatcher, the row is written through the transaction that
// holds the request's claim ([delivery.TxFrom]), so it commits with the
// claim or not at all. Without one, it is written through the Delivery's
// db. Either way a row that exists already is left alone, so a request adds
// one row however often it is delivered.
//
// Deliver answers Reject with [ErrNoRecipient] for an empty recipient and
// with [ErrUnstorable] for values the table cannot hold, and Retry when ctx
// has ended or the database fails. Reasons never name the recipient or the
// data.
func (d *Delivery) Deliver(ctx context.Context, p delivery.Pending) delivery.Outcome {
	if err := ctx.Err(); err != nil {
		return delivery.Retry(fmt.Errorf("inapp: %w", err))
	}
	if p.Recipient == "" {
		return delivery.Reject(ErrNoRecipient)
	}
	if p.ID == uuid.Nil {
		return delivery.Reject(delivery.ErrNoID)
	}
	data := []byte("{}")
	if len(p.Data) > 0 {
		b, err := json.Marshal(p.Data)
		if err != nil {
			// The encoder's message may quote a value: leave it out.
			return delivery.Reject(fmt.Errorf("%w: the data does not encode as JSON", ErrUnstorable))
		}
		data = b
	}
	var exec dbtx.Execer = d.db
	if tx, ok := delivery.TxFrom(ctx); ok {
		exec = tx
	}
	if _, err := exec.ExecContext(ctx, d.q.insert, p.ID, p.Recipient, p.Template, data, p.CorrelationID); err != nil {
		// A data exception (a NUL, invalid UTF-8) fails every time. Its
		// message may quote bytes of the value: name the condition only.
		// Read through SQLState, which the errors of lib/pq and pgx both
		// have, so that this module imports neither driver.
		var perr interface{ SQLState() string }
		if errors.As(err, &perr) && strings.HasPrefix(perr.SQLState(), sqlStateDataException) {
			return delivery.Reject(fmt.Errorf("%w: the database answered a data exception (SQLSTATE %s)",
				ErrUnstorable, perr.SQLState()))
		}
		return delivery.Retry(fmt.Errorf("inapp: write the notification: %w", err))
	}
	return delivery.DeliveredWithReference(p.ID.String())
}
