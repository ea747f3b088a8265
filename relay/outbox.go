package relay

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/migrate"
)

// Outbox is the outbox table of one schema: staging into it, and the
// operator's calls on it. It is safe for concurrent use.
type Outbox struct {
	schema string
	q      queries
	tracer trace.Tracer
	quiet  bool // stage without the wake-up
}

// OutboxConfig configures an Outbox. The zero value of each field means its
// default.
type OutboxConfig struct {
	// Schema holds the outbox table: a lower-case identifier of at most 56
	// bytes, checked here and never pasted unchecked into SQL. Default
	// "tidings" (tidings.SchemaDefault).
	Schema string

	// TracerProvider creates the producer span of each staged record. Nil
	// means the global provider.
	TracerProvider trace.TracerProvider
}

// NewOutbox returns the outbox cfg describes; a nil cfg means every
// default.
func NewOutbox(cfg *OutboxConfig) (*Outbox, error) {
	var c OutboxConfig
	if cfg != nil {
		c = *cfg
	}
	schema := cmp.Or(c.Schema, ident.SchemaDefault)
	if err := ident.CheckSchema("schema", schema); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Outbox{schema: schema, q: newQueries(schema), tracer: tp.Tracer(ScopeName)}, nil
}

var defaultOutbox, _ = NewOutbox(nil)

// WithoutWakeUp returns an Outbox that stages without waking relays at
// commit. NOTIFY takes a lock at commit that serializes committing
// writers; where that costs the writers more than it gains, stage through
// this Outbox and wake the relays after the commit with a [Waker], or let
// them poll (a short SweepInterval). Records are handed either way.
func (o *Outbox) WithoutWakeUp() *Outbox {
	quiet := *o
	quiet.quiet = true
	return &quiet
}

// wakeChannel is the NOTIFY channel staging signals, or nil for none.
func (o *Outbox) wakeChannel() any {
	if o.quiet {
		return nil
	}
	return o.q.channel
}

// ErrNotMigrated means the schema has no outbox table (or no schema):
// migrate it first, with tidings.Migrate or the migration files.
var ErrNotMigrated = errors.New("relay: schema not migrated")

// tableError wraps the error of a statement on the outbox as op, saying
// what to do when the table or its schema is missing.
func (o *Outbox) tableError(op string, err error) error {
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) {
		switch pgErr.SQLState() {
		case "42P01", "3F000": // undefined_table, invalid_schema_name
			return fmt.Errorf("%w: schema %q has no outbox table; run tidings.Migrate (or the migration files) for it first: %s: %w",
				ErrNotMigrated, o.schema, op, err)
		}
	}
	return fmt.Errorf("relay: %s: %w", op, err)
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the outbox's SQL migrations, named as golang-migrate
// expects. The files name no schema: run them with search_path set to it.
func Migrations() fs.FS { return migrate.Dir(migrationFiles) }

// Migrate creates or updates the outbox table in schema ("" means
// "tidings"). It is safe to run from many processes at once.
func Migrate(ctx context.Context, db *sql.DB, schema string) error {
	return migrate.Apply(ctx, db, cmp.Or(schema, ident.SchemaDefault), migrate.Set{Component: "relay", FS: Migrations()})
}
