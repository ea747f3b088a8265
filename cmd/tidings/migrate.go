package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

var migrateCommand = &command{
	name:    "migrate",
	args:    "",
	summary: "apply the schema, or write its SQL files for goose or golang-migrate",
	about: `Creates or updates the library's tables (the outbox, the inbox and the
recipient rules' tables; with --inapp the in-app module's table too) in
--schema, in one transaction under an advisory lock: safe from many
processes at once, and a no-op on an up-to-date schema. It runs as the
schema's owner; every other command needs only DML.

With --print goose or --print golang-migrate it connects to nothing and
writes the same SQL as that tool's files under --dir, one directory per
component (relay, inbox, notification, inapp): run each as a source of
its own, with a version table of its own, as the schema's owner with
search_path set to the schema (create the schema first: neither tool
does). It never overwrites a file.`,
	examples: `  tidings migrate
  tidings migrate --schema tidings --inapp
  tidings migrate --print goose --dir db/migrations
  tidings migrate --print golang-migrate --dir db/migrations --inapp`,
	run: runMigrate,
}

// component is a set of migrations with a version table of its own.
type component struct {
	name  string
	files fs.FS
}

func runMigrate(ctx context.Context, e *env, c *command, args []string) int {
	set, cn := c.flags(e)
	withInapp := set.Bool("inapp", false, "the in-app module's table (delivery/inapp) too")
	tool := set.String("print", "", "write the SQL files for this `tool`, goose or golang-migrate, instead of applying them")
	dir := set.String("dir", ".", "with --print: the `directory` to write the files under")
	if code, ok := c.parseFlags(e, set, args); !ok {
		return code
	}
	if err := ident.CheckSchema("--schema", cn.schema); err != nil {
		return c.usageError(e, "%v", err)
	}
	components := []component{{"relay", relay.Migrations()}, {"inbox", inbox.Migrations()},
		{"notification", notification.Migrations()}}
	if *withInapp {
		components = append(components, component{"inapp", inapp.Migrations()})
	}
	if *tool != "" {
		return writeMigrations(c, e, cn, tidings.MigrationTool(*tool), *dir, components)
	}
	s, err := cn.connect(ctx, notification.ClientConfig{})
	if err != nil {
		return c.fail(e, err)
	}
	defer s.close()
	if err := tidings.Migrate(ctx, s.db, cn.schema); err != nil {
		return c.fail(e, err)
	}
	if *withInapp {
		if err := inapp.Migrate(ctx, s.db, cn.schema); err != nil {
			return c.fail(e, err)
		}
	}
	var names []string
	for _, comp := range components {
		names = append(names, comp.name)
	}
	if cn.json {
		if err := writeJSON(e.stdout, struct {
			Schema     string   `json:"schema"`
			Components []string `json:"components"`
		}{cn.schema, names}); err != nil {
			return c.fail(e, err)
		}
		return exitOK
	}
	fmt.Fprintf(e.stdout, "schema %s is up to date: %s\n", cn.schema, strings.Join(names, ", "))
	return exitOK
}

// writeMigrations writes the files of each component for tool under
// dir/component.
func writeMigrations(c *command, e *env, cn *conn, tool tidings.MigrationTool, dir string, components []component) int {
	var written []string
	for _, comp := range components {
		files, err := tidings.MigrationFiles(comp.files, tool)
		if err != nil {
			return c.usageError(e, "--print: %v", err)
		}
		to := filepath.Join(dir, comp.name)
		if err := os.CopyFS(to, files); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return c.fail(e, fmt.Errorf("%w (remove the old files first, or pick another --dir)", err))
			}
			return c.fail(e, err)
		}
		names, err := fs.Glob(files, "*")
		if err != nil {
			return c.fail(e, err)
		}
		for _, n := range names {
			written = append(written, filepath.Join(to, n))
		}
	}
	if cn.json {
		if err := writeJSON(e.stdout, struct {
			Tool  tidings.MigrationTool `json:"tool"`
			Files []string              `json:"files"`
		}{tool, written}); err != nil {
			return c.fail(e, err)
		}
		return exitOK
	}
	for _, f := range written {
		fmt.Fprintln(e.stdout, f)
	}
	// The owner's connection string, its search_path the schema (lib/pq's
	// options; pgx takes search_path=... as it is).
	owner := fmt.Sprintf("postgres://OWNER@HOST/DB?options=-c%%20search_path%%3D%s", cn.schema)
	fmt.Fprintf(e.stdout, "\nRun each directory as a source of its own, with a version table of its own, as the owner of\n"+
		"schema %s (create it first), connected with search_path set to it:\n", cn.schema)
	for _, comp := range components {
		to := filepath.Join(dir, comp.name)
		switch tool {
		case tidings.Goose:
			fmt.Fprintf(e.stdout, "  goose -dir %s -table goose_db_version_%s postgres '%s' up\n", to, comp.name, owner)
		case tidings.GolangMigrate:
			fmt.Fprintf(e.stdout, "  migrate -path %s -database '%s&x-migrations-table=schema_migrations_%s' up\n", to, owner, comp.name)
		}
	}
	return exitOK
}
