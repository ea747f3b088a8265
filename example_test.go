package tidings_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/lib/pq"
	"github.com/pressly/goose/v3"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// Migrate with goose: each component is a source of its own with a version
// table of its own, in the schema that the sessions' search_path names.
func ExampleMigrationFiles_goose() {
	ctx := context.Background()
	// As the schema's owner; the schema exists.
	db, err := sql.Open("postgres", "postgres://owner@db.internal/app?options=-c%20search_path%3Dtidings")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, c := range []struct {
		name       string
		migrations fs.FS
	}{
		{"relay", relay.Migrations()},
		{"inbox", inbox.Migrations()},
		{"notification", notification.Migrations()},
		{"inapp", inapp.Migrations()}, // if the service delivers in-app notifications
	} {
		files, err := tidings.MigrationFiles(c.migrations, tidings.Goose)
		if err != nil {
			panic(err)
		}
		// Not p.Close: it would close db.
		p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithTableName("goose_db_version_"+c.name))
		if err != nil {
			panic(err)
		}
		if _, err := p.Up(ctx); err != nil {
			panic(err)
		}
	}
}

// Migrate with golang-migrate: each component is a source of its own with
// a version table of its own (x-migrations-table), in the schema that the
// sessions' search_path names.
func ExampleMigrationFiles_golangMigrate() {
	// As the schema's owner; the schema exists.
	const dsn = "postgres://owner@db.internal/app?options=-c%20search_path%3Dtidings"
	for _, c := range []struct {
		name       string
		migrations fs.FS
	}{
		{"relay", relay.Migrations()},
		{"inbox", inbox.Migrations()},
		{"notification", notification.Migrations()},
		{"inapp", inapp.Migrations()}, // if the service delivers in-app notifications
	} {
		files, err := tidings.MigrationFiles(c.migrations, tidings.GolangMigrate)
		if err != nil {
			panic(err)
		}
		src, err := iofs.New(files, ".")
		if err != nil {
			panic(err)
		}
		m, err := migrate.NewWithSourceInstance("iofs", src, dsn+"&x-migrations-table=schema_migrations_"+c.name)
		if err != nil {
			panic(err)
		}
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			panic(err)
		}
		if srcErr, dbErr := m.Close(); srcErr != nil || dbErr != nil {
			panic(errors.Join(srcErr, dbErr))
		}
	}
}
