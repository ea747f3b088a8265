package tidings

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/migrate"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// SchemaDefault is the schema of the library's tables when none is named.
const SchemaDefault = ident.SchemaDefault

// Migrate creates or updates every table of the library (the outbox, the
// inbox and the recipient rules' tables) in schema, "" meaning SchemaDefault, in one transaction. It
// takes an advisory lock on the schema, so many processes may call it at
// once, and leaves an up-to-date schema alone. The schema name must be a
// lower-case identifier of at most 56 bytes (room for the ".outbox" of its
// wake-up channel's name within PostgreSQL's 63); anything else is an
// error and creates nothing.
//
// The same SQL is available as files for golang-migrate and goose users:
// see MigrationFiles. A schema built from the files is then the tool's to
// upgrade: Migrate keeps its own record of versions (the schema's table
// migrations) and would apply them again.
func Migrate(ctx context.Context, db *sql.DB, schema string) error {
	if schema == "" {
		schema = SchemaDefault
	}
	return migrate.Apply(ctx, db, schema,
		migrate.Set{Component: "relay", FS: relay.Migrations()},
		migrate.Set{Component: "inbox", FS: inbox.Migrations()},
		migrate.Set{Component: "notification", FS: notification.Migrations()})
}

// MigrationTool is a migration tool whose file layout MigrationFiles
// returns.
type MigrationTool string

const (
	// GolangMigrate is github.com/golang-migrate/migrate (v4): per
	// version, NNN_title.up.sql and NNN_title.down.sql, as components
	// embed them.
	GolangMigrate MigrationTool = "golang-migrate"

	// Goose is github.com/pressly/goose (v3): per version, one
	// NNNNN_title.sql with a -- +goose Up and a -- +goose Down section,
	// each holding its file's SQL in one StatementBegin/StatementEnd block
	// so that goose sends it whole, as golang-migrate and Migrate do.
	Goose MigrationTool = "goose"
)

// MigrationFiles returns the SQL migrations of one component laid out for
// tool, made from migrations, the component's own files as
// relay.Migrations, inbox.Migrations, notification.Migrations and
// inapp.Migrations return them. The
// files are made on each call, from whatever versions the component has;
// the result is read-only and safe for concurrent use. An unknown tool, or
// files that break the layout (a bad name, two files for one version, an
// up file without its down file) is an error.
//
// Every component's versions start at 1, so run each as a source of its
// own with a version table of its own: with golang-migrate, its iofs
// source and x-migrations-table=schema_migrations_relay in the database
// URL; with goose, goose.WithTableName("goose_db_version_relay") (the
// command's -table flag, with each component's files in a directory of
// their own); and so on for each component. All run in the schema that
// holds the library's tables, as its owner: create the schema first
// (neither tool does) and connect with search_path set to it (lib/pq:
// options=-c search_path=tidings), since the files name no schema; the
// version tables land there too. The components do not depend on each
// other: migrate them in any order.
func MigrationFiles(migrations fs.FS, tool MigrationTool) (fs.FS, error) {
	var files fs.FS
	var err error
	switch tool {
	case GolangMigrate:
		files, err = migrate.GolangMigrate(migrations)
	case Goose:
		files, err = migrate.Goose(migrations)
	default:
		return nil, fmt.Errorf("tidings: migration tool %q: want %q or %q", tool, GolangMigrate, Goose)
	}
	if err != nil {
		return nil, fmt.Errorf("tidings: migration files for %s: %w", tool, err)
	}
	return files, nil
}
