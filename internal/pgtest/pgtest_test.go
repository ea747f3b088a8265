package pgtest_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	db     *sql.DB // the shared pool, as the application role
	schema string  // holds t (id serial, n int) and u (n int)
	role   string
}

func setup(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, func(ctx context.Context, db *sql.DB, schema string) error {
		s := pq.QuoteIdentifier(schema)
		_, err := db.ExecContext(ctx, `CREATE SCHEMA `+s+`;
			CREATE TABLE `+s+`.t (id serial PRIMARY KEY, n int);
			CREATE TABLE `+s+`.u (n int)`)
		return err
	})
	return testBundle{db: pgtest.DB(t), schema: schema, role: pgtest.AppRole(t)}
}

// requireRefused fails unless err is PostgreSQL's insufficient_privilege.
func requireRefused(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s was allowed", what)
	pqErr, ok := errors.AsType[*pq.Error](err)
	require.True(t, ok, "%s: %v", what, err)
	require.Equal(t, pq.ErrorCode("42501"), pqErr.Code, "%s: insufficient_privilege: %v", what, err)
}

// TestAppRole checks what every test of the suite relies on: DB, Open, Tx
// and URL connect as a role that is no superuser and has DML on the tables
// of its schema and nothing else, and the owner's handles are another role.
func TestAppRole(t *testing.T) {
	t.Parallel()

	t.Run("EveryHandleIsTheRole", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		own, err := sql.Open("postgres", pgtest.URL(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = own.Close() })
		tx := pgtest.Tx(t)
		for name, q := range map[string]interface {
			QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		}{"DB": b.db, "Open": pgtest.Open(t, 1), "Tx": tx, "URL": own} {
			var user, searchPath string
			var super, createDB, createRole, replication, bypassRLS, member bool
			require.NoError(t, q.QueryRowContext(t.Context(), `SELECT current_user, current_setting('search_path'),
					rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls,
					EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m WHERE m.member = r.oid)
				FROM pg_catalog.pg_roles r WHERE rolname = current_user`).Scan(&user, &searchPath,
				&super, &createDB, &createRole, &replication, &bypassRLS, &member), name)
			require.Equal(t, b.role, user, name)
			require.Empty(t, searchPath, name)
			require.False(t, super || createDB || createRole || replication || bypassRLS, "%s: an attribute beyond LOGIN", name)
			require.False(t, member, "%s: a member of another role", name)
		}
	})

	t.Run("HasDMLOnTheTables", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tbl := pq.QuoteIdentifier(b.schema) + ".t"
		var id int
		require.NoError(t, b.db.QueryRowContext(t.Context(), `INSERT INTO `+tbl+` (n) VALUES (1) RETURNING id`).Scan(&id),
			"insert, and the serial's nextval")
		_, err := b.db.ExecContext(t.Context(), `UPDATE `+tbl+` SET n = 2 WHERE id = $1`, id)
		require.NoError(t, err)
		var n int
		require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT n FROM `+tbl+` WHERE id = $1`, id).Scan(&n))
		require.Equal(t, 2, n)
		_, err = b.db.ExecContext(t.Context(), `DELETE FROM `+tbl+` WHERE id = $1`, id)
		require.NoError(t, err)
	})

	t.Run("HasNothingElse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := pq.QuoteIdentifier(b.schema)
		for what, stmt := range map[string]string{
			"CREATE TABLE in the schema": `CREATE TABLE ` + s + `.x (n int)`,
			"CREATE VIEW in the schema":  `CREATE VIEW ` + s + `.v AS SELECT 1`,
			"CREATE INDEX":               `CREATE INDEX ON ` + s + `.t (n)`,
			"ALTER TABLE":                `ALTER TABLE ` + s + `.t ADD COLUMN m int`,
			"DROP TABLE":                 `DROP TABLE ` + s + `.u`,
			"TRUNCATE":                   `TRUNCATE ` + s + `.u`,
			"setval":                     `SELECT pg_catalog.setval('` + s + `.t_id_seq', 100)`,
			"DROP SCHEMA":                `DROP SCHEMA ` + s + ` CASCADE`,
			"CREATE SCHEMA":              `CREATE SCHEMA ` + pq.QuoteIdentifier(b.schema+"_x"),
			"CREATE ROLE":                `CREATE ROLE ` + pq.QuoteIdentifier(b.schema+"_x"),
			"CREATE DATABASE":            `CREATE DATABASE ` + pq.QuoteIdentifier(b.schema+"_x"),
		} {
			_, err := b.db.ExecContext(t.Context(), stmt)
			requireRefused(t, err, what)
		}

		// The grants, exactly: as the catalog records them.
		rows, err := pgtest.AdminDB(t).QueryContext(t.Context(), `
			SELECT 'schema ' || a.privilege_type FROM pg_catalog.pg_namespace n, aclexplode(n.nspacl) a
				WHERE n.nspname = $1 AND a.grantee = $2::regrole
			UNION ALL
			SELECT c.relname || ' ' || a.privilege_type FROM pg_catalog.pg_class c
				JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a
				WHERE n.nspname = $1 AND a.grantee = $2::regrole
			ORDER BY 1`, b.schema, pq.QuoteIdentifier(b.role))
		require.NoError(t, err)
		defer rows.Close()
		var grants []string
		for rows.Next() {
			var g string
			require.NoError(t, rows.Scan(&g))
			grants = append(grants, g)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{
			"schema USAGE",
			"t DELETE", "t INSERT", "t SELECT", "t UPDATE",
			"t_id_seq USAGE",
			"u DELETE", "u INSERT", "u SELECT", "u UPDATE",
		}, grants)
	})

	t.Run("TheOwnerIsAnotherRole", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		admin := pgtest.AdminDB(t)
		var user string
		require.NoError(t, admin.QueryRowContext(t.Context(), `SELECT current_user`).Scan(&user))
		require.NotEqual(t, b.role, user)
		u, err := url.Parse(pgtest.AdminURL(t))
		require.NoError(t, err)
		require.Equal(t, user, u.User.Username())
		_, err = admin.ExecContext(t.Context(), `CREATE TABLE `+pq.QuoteIdentifier(b.schema)+`.x (n int)`)
		require.NoError(t, err, "the owner migrates")
	})
}
