package tidings

import (
	"context"
	"database/sql"

	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/migrate"
	"github.com/tidings-go/tidings/relay"
)

// SchemaDefault is the schema of the library's tables when none is named.
const SchemaDefault = relay.SchemaDefault

// Migrate creates or updates every table of the library (the outbox and
// the inbox) in schema, "" meaning SchemaDefault, in one transaction. It
// takes an advisory lock on the schema, so many processes may call it at
// once, and leaves an up-to-date schema alone. The schema name must be a
// lower-case identifier of at most 63 bytes; anything else is an error and
// creates nothing.
//
// The same SQL is available as plain files for golang-migrate users:
// relay.Migrations and inbox.Migrations. Both start at version 1, so run
// them as two sources, each with its own migrations table
// (x-migrations-table), and with search_path set to the schema. A schema
// built from the plain files is then theirs to upgrade: Migrate keeps its
// own record of versions and would apply them again.
func Migrate(ctx context.Context, db *sql.DB, schema string) error {
	if schema == "" {
		schema = SchemaDefault
	}
	return migrate.Apply(ctx, db, schema,
		migrate.Set{Component: "relay", FS: relay.Migrations()},
		migrate.Set{Component: "inbox", FS: inbox.Migrations()})
}
