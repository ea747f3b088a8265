package tidings_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings"
	"github.com/tidings-go/tidings/inbox"
	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/relay"
)

// schemaCounter numbers the schemas the root tests name themselves
// (t_mig_, t_lp_). Their prefixes differ from pgtest.Schema's t_tidings_,
// so they never collide.
var schemaCounter atomic.Int64

// newSchema returns the name of a schema that does not exist yet, unique to
// the test, and drops it, if it exists, when the test ends.
func newSchema(t *testing.T) string {
	t.Helper()
	schema := fmt.Sprintf("t_mig_%d_%d", os.Getpid(), schemaCounter.Add(1))
	db := pgtest.AdminDB(t)
	t.Cleanup(func() {
		// Cleanup runs after the test's context is cancelled.
		_, err := db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
		require.NoError(t, err)
	})
	return schema
}

// openAdmin returns a pool of its own as the server's owner, closed when the
// test ends. Migrations run as the owner, as AdminDB does: the application
// role of the other tests may not run them (TestLeastPrivilege).
func openAdmin(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", pgtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// component is one package's plain migration files.
type component struct {
	name string // its key in the migrations table
	fs   fs.FS
}

var components = []component{
	{name: "relay", fs: relay.Migrations()},
	{name: "inbox", fs: inbox.Migrations()},
	{name: "notification", fs: notification.Migrations()},
}

// ups returns the up files of fsys in version order.
func ups(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	names, err := fs.Glob(fsys, "*.up.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	slices.Sort(names) // NNN_ prefixes sort by version
	return names
}

// migration is one row of a schema's migrations table.
type migration struct {
	Component string
	Version   int
	Name      string
	AppliedAt time.Time
}

func migrations(t *testing.T, db *sql.DB, schema string) []migration {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT component, version, name, applied_at
		FROM "`+schema+`".migrations ORDER BY component, version`)
	require.NoError(t, err)
	defer rows.Close()
	var ms []migration
	for rows.Next() {
		var m migration
		require.NoError(t, rows.Scan(&m.Component, &m.Version, &m.Name, &m.AppliedAt))
		ms = append(ms, m)
	}
	require.NoError(t, rows.Err())
	return ms
}

// requireOneRowPerVersion checks that the migrations table of schema has
// exactly one row for each up file of each component.
func requireOneRowPerVersion(t *testing.T, db *sql.DB, schema string) []migration {
	t.Helper()
	var want []string
	for _, c := range components {
		for _, name := range ups(t, c.fs) {
			var version int
			_, err := fmt.Sscanf(name, "%d_", &version)
			require.NoError(t, err, name)
			want = append(want, fmt.Sprintf("%s %d %s", c.name, version, name))
		}
	}
	ms := migrations(t, db, schema)
	var have []string
	for _, m := range ms {
		have = append(have, fmt.Sprintf("%s %d %s", m.Component, m.Version, m.Name))
	}
	require.ElementsMatch(t, want, have)
	return ms
}

// migratedTables are the tables of a schema that Migrate made, in order.
var migratedTables = []string{"dedup", "inbox", "migrations", "outbox", "preference", "quiet_hours", "suppression", "timeline",
	"transient_failure"}

// tables returns the tables of schema, in a cleanup too.
func tables(t *testing.T, db *sql.DB, schema string) []string {
	t.Helper()
	return texts(t, db, `SELECT c.relname FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1`, schema)
}

// texts returns the one column of the rows query gives. It works in a
// cleanup too, after the test's context is cancelled.
func texts(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var values []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		values = append(values, v)
	}
	require.NoError(t, rows.Err())
	return values
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("CreatesTheTablesAndASecondRunIsANoOp", func(t *testing.T) {
		t.Parallel()
		db := pgtest.AdminDB(t)
		schema := newSchema(t)

		require.NoError(t, tidings.Migrate(t.Context(), db, schema))
		require.Equal(t, migratedTables, tables(t, db, schema))
		before := requireOneRowPerVersion(t, db, schema)
		var options []string
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT coalesce(reloptions, '{}') FROM pg_catalog.pg_class
			WHERE oid = format('%I.outbox', $1::text)::regclass`, schema).Scan(pq.Array(&options)))
		require.Equal(t, []string{"autovacuum_vacuum_scale_factor=0.02"}, options, "the outbox is vacuumed sooner than the server's default")

		require.NoError(t, tidings.Migrate(t.Context(), db, schema))
		after := requireOneRowPerVersion(t, db, schema)
		require.Equal(t, before, after, "the second Migrate applied something again")
		require.Equal(t, migratedTables, tables(t, db, schema))
	})

	t.Run("TenAtOnceOnTenConnections", func(t *testing.T) {
		t.Parallel()
		schema := newSchema(t)
		const n = 10
		pools := make([]*sql.DB, n)
		for i := range pools {
			pools[i] = openAdmin(t)
			pools[i].SetMaxOpenConns(1)
			require.NoError(t, pools[i].PingContext(t.Context())) // connect before the start
		}
		start := make(chan struct{})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, db := range pools {
			wg.Go(func() {
				<-start
				errs[i] = tidings.Migrate(t.Context(), db, schema)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "Migrate #%d", i)
		}
		requireOneRowPerVersion(t, pgtest.AdminDB(t), schema)
		require.Equal(t, migratedTables, tables(t, pgtest.AdminDB(t), schema))
	})

	t.Run("TheRulesKeysCompareBytewise", func(t *testing.T) {
		t.Parallel()
		db := pgtest.AdminDB(t)
		schema := newSchema(t)
		require.NoError(t, tidings.Migrate(t.Context(), db, schema))

		// Whatever the database's collation (the test cluster's is "C"
		// anyway): under a linguistic one every search of these keys'
		// indexes and every sort of dedup keys calls the C library.
		bytewise := texts(t, db, `SELECT table_name || '.' || column_name FROM information_schema.columns
			WHERE table_schema = $1 AND collation_name = 'C' ORDER BY 1`, schema)
		require.Equal(t, []string{"dedup.consumer", "dedup.key", "preference.category", "preference.channel", "preference.subject",
			"quiet_hours.subject", "suppression.address", "suppression.channel", "suppression.scope",
			"transient_failure.address", "transient_failure.channel", "transient_failure.message_id"}, bytewise)
	})

	// The schema's owner, given the schema by someone who may create
	// schemas, migrates it without the CREATE on the database that
	// creating a schema takes: a least-privilege setup the tools' docs
	// recommend.
	t.Run("AsTheSchemasOwnerAlone", func(t *testing.T) {
		t.Parallel()
		admin := pgtest.AdminDB(t)
		schema := newSchema(t)
		role, password := schema+"_owner", rand.Text()
		_, err := admin.ExecContext(t.Context(), `CREATE ROLE `+role+` LOGIN PASSWORD `+pq.QuoteLiteral(password))
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := admin.ExecContext(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
			require.NoError(t, err)
		})
		_, err = admin.ExecContext(t.Context(), `CREATE SCHEMA `+schema+` AUTHORIZATION `+role)
		require.NoError(t, err)
		u, err := url.Parse(pgtest.AdminURL(t))
		require.NoError(t, err)
		u.User = url.UserPassword(role, password)
		owner, err := sql.Open("postgres", u.String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = owner.Close() })
		var createOnDB bool
		require.NoError(t, owner.QueryRowContext(t.Context(), `SELECT has_database_privilege(current_database(), 'CREATE')`).Scan(&createOnDB))
		require.False(t, createOnDB, "the owner may create schemas: the test would prove nothing")

		require.NoError(t, tidings.Migrate(t.Context(), owner, schema))
		require.Equal(t, migratedTables, tables(t, admin, schema))
		require.NoError(t, tidings.Migrate(t.Context(), owner, schema), "and again, up to date")
	})

	t.Run("BadSchemaNamesCreateNothing", func(t *testing.T) {
		t.Parallel()
		db := pgtest.AdminDB(t)
		// Other tests, in this binary and in others sharing the server,
		// create and drop schemas named t_... meanwhile, and sessions that
		// use temporary tables create pg_temp_N: leave them out.
		others := func() []string {
			return texts(t, db, `SELECT nspname FROM pg_catalog.pg_namespace
				WHERE nspname NOT LIKE 't\_%' AND nspname NOT LIKE 'pg\_temp\_%'
					AND nspname NOT LIKE 'pg\_toast\_temp\_%'
				ORDER BY 1`)
		}
		before := others()

		bad := []string{
			`a"; drop table x;--`,
			"Upper",
			strings.Repeat("a", 64),
			strings.Repeat("a", 57), // no room for its wake-up channel's ".outbox"
			"a.b",
			"1a",
			" ",
		}
		for _, name := range bad {
			for fn, migrate := range map[string]pgtest.MigrateFunc{
				"tidings.Migrate": tidings.Migrate,
				"relay.Migrate":   relay.Migrate,
				"inbox.Migrate":   inbox.Migrate,
			} {
				err := migrate(t.Context(), db, name)
				require.ErrorContains(t, err, "schema", "%s(%q)", fn, name)
			}
		}

		require.Equal(t, before, others(), "a bad name created a schema")
		var n int
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_catalog.pg_namespace
			WHERE nspname ILIKE '%drop%' OR nspname = ANY ($1) OR nspname = ANY ($2)`,
			pq.Array(bad),
			// PostgreSQL truncates identifiers to 63 bytes and folds unquoted ones to lower case.
			pq.Array([]string{strings.Repeat("a", 63), "upper", "a", "b"}),
		).Scan(&n))
		require.Zero(t, n)
	})
}

var migrationName = regexp.MustCompile(`^([0-9]{3})_[a-z0-9_]+\.(up|down)\.sql$`)

// TestMigrationFiles checks the plain files that golang-migrate users run
// themselves: each up file has a down file, and the files, applied by hand
// with search_path set to a fresh schema, build the schema Migrate builds
// and then remove it all.
func TestMigrationFiles(t *testing.T) {
	t.Parallel()

	t.Run("NamedAsGolangMigrateExpects", func(t *testing.T) {
		t.Parallel()
		for _, c := range components {
			entries, err := fs.ReadDir(c.fs, ".")
			require.NoError(t, err)
			require.NotEmpty(t, entries, c.name)
			ups, downs := map[string]bool{}, map[string]bool{}
			for _, e := range entries {
				m := migrationName.FindStringSubmatch(e.Name())
				require.NotNil(t, m, "%s: %s is not NNN_title.up.sql or NNN_title.down.sql", c.name, e.Name())
				base := strings.TrimSuffix(e.Name(), "."+m[2]+".sql")
				if m[2] == "up" {
					ups[base] = true
				} else {
					downs[base] = true
				}
			}
			require.Equal(t, ups, downs, "%s: every up file needs a down file and the other way round", c.name)
		}
	})

	t.Run("UpThenDownByHandLeavesTheSchemaEmpty", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// A pool of its own: the session's search_path changes.
		db := openAdmin(t)
		db.SetMaxOpenConns(1)
		schema := newSchema(t)
		reference := pgtest.Schema(t, tidings.Migrate)

		_, err := db.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, `SET search_path TO "`+schema+`"`)
		require.NoError(t, err)

		for _, c := range components {
			for _, name := range ups(t, c.fs) {
				body, err := fs.ReadFile(c.fs, name)
				require.NoError(t, err)
				_, err = db.ExecContext(ctx, string(body))
				require.NoError(t, err, "%s: %s", c.name, name)
			}
		}
		require.Equal(t, slices.DeleteFunc(slices.Clone(migratedTables), func(t string) bool { return t == "migrations" }),
			tables(t, db, schema))
		require.Equal(t, shape(t, db, reference), shape(t, db, schema),
			"the plain files and Migrate build different tables")

		for _, c := range slices.Backward(components) {
			for _, up := range slices.Backward(ups(t, c.fs)) {
				name := strings.TrimSuffix(up, ".up.sql") + ".down.sql"
				body, err := fs.ReadFile(c.fs, name)
				require.NoError(t, err)
				_, err = db.ExecContext(ctx, string(body))
				require.NoError(t, err, "%s: %s", c.name, name)
			}
		}

		var objects int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace)
			+ (SELECT count(*) FROM pg_catalog.pg_type WHERE typnamespace = $1::regnamespace)
			+ (SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = $1::regnamespace)`,
			`"`+schema+`"`).Scan(&objects))
		require.Zero(t, objects, "the down files left objects in the schema")
	})
}

// shape describes the tables and indexes of schema, without its name.
func shape(t *testing.T, db *sql.DB, schema string) []string {
	t.Helper()
	lines := texts(t, db, `
		SELECT format('column %s.%s %s null=%s default=%s collation=%s', table_name, column_name, data_type, is_nullable,
			coalesce(column_default, ''), coalesce(collation_name, ''))
		FROM information_schema.columns WHERE table_schema = $1 AND table_name <> 'migrations'
		UNION ALL
		SELECT format('index %s', replace(indexdef, $2, 'SCHEMA.'))
		FROM pg_catalog.pg_indexes WHERE schemaname = $1 AND tablename <> 'migrations'
		ORDER BY 1`, schema, schema+".")
	require.NotEmpty(t, lines)
	return lines
}
