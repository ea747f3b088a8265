// Package migrate applies the versioned SQL files that the library's
// packages embed (relay/migrations, inbox/migrations) into one schema.
//
// Files are named as golang-migrate expects (NNN_title.up.sql and
// NNN_title.down.sql) and name their tables without a schema, so they work
// as plain files under any search_path. Apply runs them in one transaction
// with search_path set to the schema, under an advisory lock keyed by the
// schema, recording each applied version in <schema>.migrations: many
// processes may migrate at once, and a migrated schema is left alone.
//
// GolangMigrate and Goose return the same files laid out for those tools,
// made from the embedded files when asked, so a version added later is in
// every layout without further work.
package migrate

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/tidings-go/tidings/internal/ident"
)

// Dir returns the migrations directory of a package's embedded files.
func Dir(files embed.FS) fs.FS {
	sub, err := fs.Sub(files, "migrations")
	if err != nil {
		panic(err) // a fixed, valid path
	}
	return sub
}

// Set is the migrations of one component (one package's tables).
type Set struct {
	Component string // "relay", "inbox": the key of its versions
	FS        fs.FS  // holds NNN_title.up.sql files at its root
}

type step struct {
	version int
	name    string
	sql     string
}

// Apply brings schema up to date with every set, creating the schema when
// it does not exist.
func Apply(ctx context.Context, db *sql.DB, schema string, sets ...Set) error {
	if err := ident.CheckSchema("schema", schema); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	plans := make([][]step, len(sets))
	for i, set := range sets {
		steps, err := read(set.FS)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", set.Component, err)
		}
		plans[i] = steps
	}
	// Read committed whatever the server's default: each statement must
	// see what a migrator that held the lock before us committed.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	q := ident.Quote(schema)
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('tidings.migrate.' || $1))`, schema); err != nil {
		return fmt.Errorf("migrate: prepare schema %s: %w", schema, err)
	}
	// The schema is created only when missing: CREATE SCHEMA IF NOT
	// EXISTS takes CREATE on the database even when the schema exists,
	// which its owner alone, given it by someone who may create schemas,
	// does not have. Asked after the lock, in a statement of its own, so
	// that it sees what a migrator that held the lock before committed.
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)`,
		schema).Scan(&exists); err != nil {
		return fmt.Errorf("migrate: prepare schema %s: %w", schema, err)
	}
	stmts := []string{`SET LOCAL search_path TO ` + q,
		`CREATE TABLE IF NOT EXISTS migrations (
			component text NOT NULL,
			version int NOT NULL,
			name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (component, version))`,
	}
	if !exists {
		stmts = append([]string{`CREATE SCHEMA ` + q}, stmts...)
	}
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: prepare schema %s: %w", schema, err)
		}
	}
	for i, set := range sets {
		var current int
		err := tx.QueryRowContext(ctx,
			`SELECT coalesce(max(version), 0) FROM migrations WHERE component = $1`,
			set.Component).Scan(&current)
		if err != nil {
			return fmt.Errorf("migrate %s: read version: %w", set.Component, err)
		}
		for _, s := range plans[i] {
			if s.version <= current {
				continue
			}
			if _, err := tx.ExecContext(ctx, s.sql); err != nil {
				return fmt.Errorf("migrate %s: %s: %w", set.Component, s.name, err)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO migrations (component, version, name) VALUES ($1, $2, $3)`,
				set.Component, s.version, s.name); err != nil {
				return fmt.Errorf("migrate %s: record %s: %w", set.Component, s.name, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// read returns the up steps of fsys in version order.
func read(fsys fs.FS) ([]step, error) {
	versions, err := parse(fsys)
	if err != nil {
		return nil, err
	}
	steps := make([]step, len(versions))
	for i, v := range versions {
		steps[i] = step{version: v.number, name: v.up.name, sql: string(v.up.body)}
	}
	return steps, nil
}
