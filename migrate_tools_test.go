package tidings_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/postgres" // the postgres:// URLs of migrate.New
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/google/uuid"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/inapp"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/recording"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/relaytest"
)

// everyComponent is every component that embeds migrations, with the
// directory of its files: what a goose or golang-migrate user runs, each
// component as a source of its own.
var everyComponent = []struct {
	component
	dir string
}{
	{component{name: "relay", fs: relay.Migrations()}, "relay/migrations"},
	{component{name: "inbox", fs: inbox.Migrations()}, "inbox/migrations"},
	{component{name: "notification", fs: notification.Migrations()}, "notification/migrations"},
	{component{name: "inapp", fs: inapp.Migrations()}, "delivery/inapp/migrations"},
}

// migrateEverything is what a service that uses every component runs
// instead of the tools.
func migrateEverything(ctx context.Context, db *sql.DB, schema string) error {
	if err := tidings.Migrate(ctx, db, schema); err != nil {
		return err
	}
	return inapp.Migrate(ctx, db, schema)
}

// migrationTool runs a component's files as a user of the tool would.
type migrationTool struct {
	name tidings.MigrationTool
	// versionTable is the version table of a component.
	versionTable func(component string) string
	// run migrates c up to its latest version, or down to none, in the
	// schema that the search_path of dsn (the server's owner) names, with
	// table as c's version table, and returns the version it is at then.
	run func(t *testing.T, dsn string, c component, table string, up bool) int64
}

var migrationTools = []migrationTool{
	{
		name:         tidings.Goose,
		versionTable: func(c string) string { return "goose_db_version_" + c },
		run: func(t *testing.T, dsn string, c component, table string, up bool) int64 {
			t.Helper()
			ctx := t.Context()
			files, err := tidings.MigrationFiles(c.fs, tidings.Goose)
			require.NoError(t, err)
			db, err := sql.Open("postgres", dsn)
			require.NoError(t, err)
			defer db.Close()
			p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithTableName(table))
			require.NoError(t, err)
			if up {
				_, err = p.Up(ctx)
			} else {
				_, err = p.DownTo(ctx, 0)
			}
			require.NoError(t, err, "goose %s, up %t", c.name, up)
			version, err := p.GetDBVersion(ctx)
			require.NoError(t, err)
			return version
		},
	},
	{
		name:         tidings.GolangMigrate,
		versionTable: func(c string) string { return "schema_migrations_" + c },
		run: func(t *testing.T, dsn string, c component, table string, up bool) int64 {
			t.Helper()
			m, closeM := golangMigrate(t, dsn, c, table)
			defer closeM()
			var err error
			if up {
				err = m.Up()
			} else {
				err = m.Down()
			}
			if !errors.Is(err, migrate.ErrNoChange) {
				require.NoError(t, err, "golang-migrate %s, up %t", c.name, up)
			}
			version, dirty, err := m.Version()
			if errors.Is(err, migrate.ErrNilVersion) {
				return 0
			}
			require.NoError(t, err)
			require.False(t, dirty, "golang-migrate %s: dirty", c.name)
			return int64(version)
		},
	},
}

// golangMigrate opens golang-migrate's migrator of c's files in the
// schema that the search_path of dsn names, with table as c's version
// table, and returns it with the function that closes it.
func golangMigrate(t *testing.T, dsn string, c component, table string) (*migrate.Migrate, func()) {
	t.Helper()
	files, err := tidings.MigrationFiles(c.fs, tidings.GolangMigrate)
	require.NoError(t, err)
	src, err := iofs.New(files, ".")
	require.NoError(t, err)
	m, err := migrate.NewWithSourceInstance("iofs", src, withQuery(t, dsn, "x-migrations-table", table))
	require.NoError(t, err)
	return m, func() {
		srcErr, dbErr := m.Close()
		require.NoError(t, errors.Join(srcErr, dbErr))
	}
}

// versionTables returns a pattern of the version tables of comps, and of
// what belongs to them (a key, a sequence), for catalog to leave out.
func (tool migrationTool) versionTables(comps []component) string {
	var tables []string
	for _, c := range comps {
		tables = append(tables, regexp.QuoteMeta(tool.versionTable(c.name)))
	}
	return `^(` + strings.Join(tables, "|") + `)(_|$)`
}

// withQuery returns rawURL with its query parameter key set to value.
func withQuery(t *testing.T, rawURL, key, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// createSchema creates a schema that is dropped when the test ends, and
// returns its name and a connection string of the server's owner whose
// sessions have it as search_path, as the tools' users connect.
func createSchema(t *testing.T) (schema, dsn string) {
	t.Helper()
	schema = newSchema(t)
	_, err := pgtest.AdminDB(t).ExecContext(t.Context(), `CREATE SCHEMA "`+schema+`"`)
	require.NoError(t, err)
	return schema, withQuery(t, pgtest.AdminURL(t), "options", "-c search_path="+schema)
}

// latest returns the highest version of c's files.
func latest(t *testing.T, c component) int64 {
	t.Helper()
	names := ups(t, c.fs)
	var version int64
	_, err := fmt.Sscanf(names[len(names)-1], "%d_", &version)
	require.NoError(t, err)
	return version
}

// requireUpDownUp migrates comps with tool in a fresh schema up to their
// latest versions, down to none, and up again, checking the versions at
// each step, that the version tables are in the schema, and that going
// down leaves nothing there but them. It returns the schema.
func requireUpDownUp(t *testing.T, tool migrationTool, comps []component) string {
	t.Helper()
	schema, dsn := createSchema(t)
	versionTables := tool.versionTables(comps)
	up := func() {
		for _, c := range comps {
			table := tool.versionTable(c.name)
			require.Equal(t, latest(t, c), tool.run(t, dsn, c, table, true), "%s: version after up", c.name)
			require.Contains(t, tables(t, pgtest.AdminDB(t), schema), table, "the version table is not in the schema")
		}
		require.NotEmpty(t, catalog(t, schema, versionTables))
	}

	up()
	for _, c := range slices.Backward(comps) {
		require.Zero(t, tool.run(t, dsn, c, tool.versionTable(c.name), false), "%s: version after down", c.name)
	}
	require.Empty(t, catalog(t, schema, versionTables), "going down left objects in the schema")
	up()
	return schema
}

// catalog describes what schema holds, without the schema's name:
// relations (with their storage parameters), columns (with their
// collations), indexes, constraints, triggers, functions and types,
// leaving out the relations whose names ignore matches and what is
// theirs.
func catalog(t *testing.T, schema, ignore string) []string {
	t.Helper()
	lines := texts(t, pgtest.AdminDB(t), `
		WITH rel AS (
			SELECT c.oid, c.relname, c.relkind, c.reloptions FROM pg_catalog.pg_class c
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname !~ $2)
		SELECT format('relation %s %s %s', relkind, relname, reloptions) FROM rel
		UNION ALL
		SELECT format('column %s.%s %s not_null=%s default=%s collation=%s', r.relname, a.attname,
			format_type(a.atttypid, a.atttypmod), a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
			coalesce(co.collname, ''))
		FROM rel r JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
		WHERE r.relkind <> 'i'
		UNION ALL
		SELECT format('index %s', pg_get_indexdef(r.oid)) FROM rel r WHERE r.relkind = 'i'
		UNION ALL
		SELECT format('constraint %s.%s %s', r.relname, con.conname, pg_get_constraintdef(con.oid))
		FROM rel r JOIN pg_catalog.pg_constraint con ON con.conrelid = r.oid
		UNION ALL
		SELECT format('trigger %s', pg_get_triggerdef(tg.oid))
		FROM rel r JOIN pg_catalog.pg_trigger tg ON tg.tgrelid = r.oid AND NOT tg.tgisinternal
		UNION ALL
		SELECT format('function %s(%s)', p.proname, pg_get_function_identity_arguments(p.oid))
		FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		UNION ALL
		SELECT format('type %s %s', t.typname, t.typtype)
		FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname = $1 AND t.typtype NOT IN ('b', 'c') -- not a table's row type or its array
		ORDER BY 1`, schema, ignore)
	for i, line := range lines {
		lines[i] = strings.ReplaceAll(line, schema+".", "SCHEMA.")
	}
	return lines
}

// requireDelivers stages a notification request into schema as an
// application does, and checks that a relay handing it to a dispatcher
// delivers it: the library works on a schema that a tool built. It is the
// one place to adapt when the relay's or the dispatcher's API changes.
func requireDelivers(t *testing.T, schema string) {
	t.Helper()
	ctx := t.Context()
	pgtest.Grant(t, pgtest.AdminDB(t), schema)
	db := pgtest.DB(t) // the application role: DML only
	const module = "tools"

	client, err := notification.NewClient(db, &notification.ClientConfig{Schema: schema})
	require.NoError(t, err)
	id, err := client.Stage(ctx, db, module, notification.Request{Channel: "mail", Recipient: "someone@example.com", Template: "welcome"})
	require.NoError(t, err)

	mail := recording.New()
	d, err := notification.NewDispatcher(&notification.Config{
		Deliveries: map[string]delivery.Delivery{"mail": mail},
	})
	require.NoError(t, err)
	relaytest.Supervise(t, db, relay.Config{Module: module, Schema: schema}, d)

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := client.Wait(waitCtx, id)
	require.NoError(t, err)
	require.Equal(t, relay.StateProcessed, st.State, "%+v", st)
	require.Equal(t, 1, mail.Count(id))
}

// plpgsql is a component whose up file has a function with lines that
// end in a semicolon: goose, left to cut the file into statements itself,
// would cut the function there.
var plpgsql = component{name: "plpgsql", fs: fstest.MapFS{
	"001_counter.up.sql": {Data: []byte(`-- A counter; and its function.
CREATE TABLE counter (n int NOT NULL);
CREATE FUNCTION counter_next() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    UPDATE counter SET n = n + 1;
    RETURN (SELECT n FROM counter);
END
$$;
`)},
	"001_counter.down.sql": {Data: []byte("DROP FUNCTION counter_next();\nDROP TABLE counter;\n")},
}}

// TestMigrationTools runs every component's files with goose and with
// golang-migrate, as MigrationFiles lays them out: up, down, up again,
// each tool in a fresh schema. The result must equal what Migrate builds,
// and the library must deliver a request on it.
func TestMigrationTools(t *testing.T) {
	t.Parallel()

	var comps []component
	for _, c := range everyComponent {
		comps = append(comps, c.component)
	}
	for _, tool := range migrationTools {
		t.Run(string(tool.name), func(t *testing.T) {
			t.Parallel()

			t.Run("BuildsWhatMigrateBuildsAndTheLibraryWorks", func(t *testing.T) {
				t.Parallel()
				schema := requireUpDownUp(t, tool, comps)
				reference := pgtest.Schema(t, migrateEverything)
				require.Equal(t,
					catalog(t, reference, `^migrations(_pkey)?$`),
					catalog(t, schema, tool.versionTables(comps)),
					"%s and Migrate build different schemas", tool.name)
				requireDelivers(t, schema)
			})

			t.Run("AFunctionBodyStaysWhole", func(t *testing.T) {
				t.Parallel()
				schema := requireUpDownUp(t, tool, []component{plpgsql})
				require.Contains(t, catalog(t, schema, tool.versionTables([]component{plpgsql})), "function counter_next()")
			})
		})
	}

	t.Run("EveryComponentIsRun", func(t *testing.T) {
		t.Parallel()
		var dirs []string
		require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".":
				return filepath.SkipDir
			case d.IsDir() && d.Name() == "migrations":
				dirs = append(dirs, filepath.ToSlash(path))
			}
			return nil
		}))
		var known []string
		for _, c := range everyComponent {
			known = append(known, c.dir)
			onDisk, err := fs.Glob(os.DirFS(c.dir), "*")
			require.NoError(t, err)
			embedded, err := fs.Glob(c.fs, "*")
			require.NoError(t, err)
			require.Equal(t, onDisk, embedded, "%s: the files of %s", c.name, c.dir)
		}
		require.ElementsMatch(t, known, dirs, "a migrations directory is missing from everyComponent")
	})

	t.Run("AnUnknownToolIsAnError", func(t *testing.T) {
		t.Parallel()
		files, err := tidings.MigrationFiles(relay.Migrations(), "flyway")
		require.ErrorContains(t, err, `"flyway"`)
		require.Nil(t, files)
	})
}

// TestSecretsMoveIntoTheirRows upgrades a schema with a pending record's
// secret in the secret table of relay version 10 to version 11, which
// keeps secrets in the outbox rows, and back: the secret is never lost,
// and the record without one gains none.
func TestSecretsMoveIntoTheirRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema, dsn := createSchema(t)
	m, closeM := golangMigrate(t, dsn, component{name: "relay", fs: relay.Migrations()}, "schema_migrations_relay")
	defer closeM()
	db := pgtest.AdminDB(t)
	q := `"` + schema + `".`
	withSecret, without := uuid.New(), uuid.New()

	require.NoError(t, m.Migrate(10))
	_, err := db.ExecContext(ctx, `INSERT INTO `+q+`outbox (id, module, kind, payload, has_secret)
		VALUES ($1, 'm', 'k', '{}', true), ($2, 'm', 'k', '{}', false)`, withSecret, without)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO `+q+`secret (record_id, value) VALUES ($1, 'code-1')`, withSecret)
	require.NoError(t, err)

	require.NoError(t, m.Migrate(11))
	secrets := func(query string) map[uuid.UUID]string {
		rows, err := db.QueryContext(ctx, query)
		require.NoError(t, err)
		defer rows.Close()
		got := map[uuid.UUID]string{}
		for rows.Next() {
			var id uuid.UUID
			var value string
			require.NoError(t, rows.Scan(&id, &value))
			got[id] = value
		}
		require.NoError(t, rows.Err())
		return got
	}
	require.Equal(t, map[uuid.UUID]string{withSecret: "code-1"},
		secrets(`SELECT id, secret FROM `+q+`outbox WHERE secret IS NOT NULL`), "up: the secret in its row")

	require.NoError(t, m.Migrate(10))
	require.Equal(t, map[uuid.UUID]string{withSecret: "code-1"},
		secrets(`SELECT record_id, value FROM `+q+`secret`), "down: the secret back in its table")
	require.Equal(t, map[uuid.UUID]string{withSecret: "true"},
		secrets(`SELECT id, has_secret::text FROM `+q+`outbox WHERE has_secret`), "down: its row marked")
}
