// Package pgtest gives tests a real PostgreSQL: one throwaway cluster per
// test binary (or the server TIDINGS_TEST_DATABASE_URL names), a shared
// pool, a fresh migrated schema per test, and a rolled-back transaction per
// test.
//
// Tests connect as the application role (AppRole), as a production relay
// should: a login role that is no superuser, may create neither databases
// nor roles, and holds only what Schema grants it, DML on the tables of the
// test's schema. What needs more (running migrations, creating roles,
// terminating or inspecting the sessions of other roles) goes through the
// server's owner: AdminURL and AdminDB. Benchmarks (DurableURL) connect as
// the owner of their own server.
//
// Test connections have an empty search_path, so a query that forgets its
// schema fails loudly.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lib/pq"
	"go.uber.org/goleak"

	"github.com/tidings-go/tidings/internal/pgtemp"
)

// EnvURL names a server to use instead of a throwaway cluster. Its user
// must be a superuser or have CREATEROLE: each test binary creates an
// application role of its own there, with a random password, and drops it
// when it ends.
const EnvURL = "TIDINGS_TEST_DATABASE_URL"

// appRoleLocal is the application role on throwaway clusters. They trust
// loopback connections, so it has no password.
const appRoleLocal = "tidings_app"

// role is the application role of this test binary: tidings_app on
// throwaway clusters; on the server EnvURL names, a name and a password
// of the binary's own, so binaries sharing that server never change each
// other's role.
var role = sync.OnceValue(func() appRole {
	if os.Getenv(EnvURL) == "" {
		return appRole{name: appRoleLocal}
	}
	return appRole{name: appRoleLocal + "_" + strings.ToLower(rand.Text()[:10]), password: rand.Text()}
})

type appRole struct{ name, password string }

var (
	mu       sync.Mutex
	cluster  *pgtemp.Cluster
	adminURL string // the owner's connection string; set once the role exists
	appURL   string // the application role's
	external bool   // the server is EnvURL's: drop the role at the end
	admin    *sql.DB
	shared   *sql.DB
	counter  atomic.Int64
)

// Main runs the tests, drops the application role from the server
// EnvURL names, stops the cluster, and fails the binary when a goroutine
// leaked. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if shared != nil {
		_ = shared.Close()
	}
	if admin != nil {
		if external && adminURL != "" {
			// setup created the role. Every schema the role had a grant on
			// is dropped by now.
			if _, err := admin.ExecContext(context.Background(), `DROP ROLE `+pq.QuoteIdentifier(role().name)); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: drop role %s: %v\n", role().name, err)
				code = max(code, 1)
			}
		}
		_ = admin.Close()
	}
	if cluster != nil {
		_ = cluster.Stop()
	}
	mu.Unlock()
	stopDurable()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// setup starts the throwaway cluster (or takes EnvURL's server), opens the
// owner's pool and creates the application role, once. The caller holds
// mu.
func setup(tb testing.TB) {
	tb.Helper()
	if adminURL != "" {
		return
	}
	raw := os.Getenv(EnvURL)
	external = raw != ""
	if !external {
		if cluster == nil {
			c, err := pgtemp.Start(context.Background(), nil)
			if err != nil {
				tb.Fatalf("pgtest: %v", err)
			}
			cluster = c
		}
		raw = cluster.URL()
	}
	owner := withEmptySearchPath(tb, raw)
	if admin == nil {
		db, err := sql.Open("postgres", owner)
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		db.SetMaxOpenConns(20)
		admin = db
	}
	app, err := ensureRole(context.Background(), admin, owner)
	if err != nil && external {
		tb.Fatalf("pgtest: %s: %v", EnvURL, err)
	}
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	adminURL, appURL = owner, app
}

// URL returns a connection string of the test server as the application
// role, starting the throwaway cluster and creating the role on first use.
// Its sessions have an empty search_path.
func URL(tb testing.TB) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	setup(tb)
	return appURL
}

// AdminURL returns a connection string of the test server as its owner (a
// superuser on the throwaway cluster, EnvURL's user otherwise), for what
// the application role may not do. Its sessions have an empty search_path.
func AdminURL(tb testing.TB) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	setup(tb)
	return adminURL
}

// AppRole returns the name of the application role the tests connect as.
func AppRole(tb testing.TB) string {
	tb.Helper()
	return role().name
}

func withEmptySearchPath(tb testing.TB, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("pgtest: %s is not a URL: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("options", "-c search_path=")
	u.RawQuery = q.Encode()
	return u.String()
}

// DB returns the pool shared by the tests of this binary, connected as the
// application role. Do not close it.
func DB(tb testing.TB) *sql.DB {
	tb.Helper()
	dsn := URL(tb)
	mu.Lock()
	defer mu.Unlock()
	if shared == nil {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		db.SetMaxOpenConns(40)
		// Kept open: database/sql keeps two idle by default, and a test
		// whose deliveries each hold a transaction would open a session
		// for almost every one.
		db.SetMaxIdleConns(40)
		shared = db
	}
	return shared
}

// AdminDB returns the pool of the server's owner shared by the tests of
// this binary: for migrations, and for what a test does to the server
// rather than as the application. Do not close it.
func AdminDB(tb testing.TB) *sql.DB {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	setup(tb)
	return admin
}

// Open returns a pool of its own of at most conns connections, all kept
// idle between uses, connected as the application role and closed when
// the test ends: for tests that need their own limits or must not share
// sessions.
func Open(tb testing.TB, conns int) *sql.DB {
	tb.Helper()
	db, err := sql.Open("postgres", URL(tb))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// MigrateFunc installs the library's tables into schema.
type MigrateFunc func(ctx context.Context, db *sql.DB, schema string) error

// Schema creates a schema of its own for the test, migrates it with migrate
// as the server's owner, grants the application role DML on its tables
// (see Grant) and drops it when the test ends. Its name is the test
// binary's package plus the process id and a counter, so parallel tests and
// parallel test binaries never share one.
func Schema(tb testing.TB, migrate MigrateFunc) string {
	tb.Helper()
	db := AdminDB(tb)
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	pkg = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(pkg))
	schema := fmt.Sprintf("t_%s_%d_%d", pkg, os.Getpid(), counter.Add(1))
	tb.Cleanup(func() {
		// Cleanup runs after the test's context is cancelled.
		if _, err := db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+pq.QuoteIdentifier(schema)+` CASCADE`); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	if err := migrate(tb.Context(), db, schema); err != nil {
		tb.Fatalf("pgtest: migrate %s: %v", schema, err)
	}
	Grant(tb, db, schema)
	return schema
}

// Grant gives the application role what the library needs in schema, and
// nothing else: USAGE on the schema, SELECT, INSERT, UPDATE and DELETE on
// its tables, and USAGE on its sequences. Never TRUNCATE, and never CREATE:
// migrations do not run as the role. Schema calls it; a test that migrates
// a server of its own calls it with that server's owner pool, after AppURL
// created the role there.
func Grant(tb testing.TB, owner *sql.DB, schema string) {
	tb.Helper()
	s, r := pq.QuoteIdentifier(schema), pq.QuoteIdentifier(role().name)
	for _, stmt := range []string{
		`GRANT USAGE ON SCHEMA ` + s + ` TO ` + r,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + s + ` TO ` + r,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA ` + s + ` TO ` + r,
	} {
		if _, err := owner.ExecContext(tb.Context(), stmt); err != nil {
			tb.Fatalf("pgtest: %s: %v", stmt, err)
		}
	}
}

// Cluster starts a server of the test's own (pgtemp.Start with opts),
// stopped when the test ends; its owner migrates schema into it with
// migrate and grants the application role its tables. It returns the
// role's connection string and the cluster: for tests that crash the
// server or set its clock off.
func Cluster(tb testing.TB, opts *pgtemp.Options, migrate func(context.Context, *sql.DB, string) error, schema string) (string, *pgtemp.Cluster) {
	tb.Helper()
	cluster, err := pgtemp.Start(tb.Context(), opts)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	app := AppURL(tb, cluster.URL())
	owner, err := sql.Open("postgres", cluster.URL())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer owner.Close()
	if err := migrate(tb.Context(), owner, schema); err != nil {
		tb.Fatalf("pgtest: migrate %s: %v", schema, err)
	}
	Grant(tb, owner, schema)
	return app, cluster
}

// AppURL creates the application role on the server ownerURL names, if it
// is missing there, and returns ownerURL with the role as its user: for
// tests that start a server of their own. Then give the role its tables
// with Grant once they are migrated.
func AppURL(tb testing.TB, ownerURL string) string {
	tb.Helper()
	owner, err := sql.Open("postgres", ownerURL)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer owner.Close()
	app, err := ensureRole(tb.Context(), owner, ownerURL)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return app
}

// ensureRole creates the application role through owner, whose connection
// string is ownerURL, unless it exists with no more than LOGIN, checks that
// it can connect, and returns ownerURL with the role as its user.
func ensureRole(ctx context.Context, owner *sql.DB, ownerURL string) (string, error) {
	r := role()
	tx, err := owner.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("connect as the server's owner: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// One at a time, whoever else shares the server.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('tidings.pgtest.role'))`); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	var more bool
	err = tx.QueryRowContext(ctx, `SELECT rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls
			OR NOT rolcanlogin OR EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m WHERE m.member = r.oid)
		FROM pg_catalog.pg_roles r WHERE rolname = $1`, r.name).Scan(&more)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		var user string
		var may bool
		if err := tx.QueryRowContext(ctx, `SELECT current_user, rolsuper OR rolcreaterole
			FROM pg_catalog.pg_roles WHERE rolname = current_user`).Scan(&user, &may); err != nil {
			return "", fmt.Errorf("read the owner's attributes: %w", err)
		}
		if !may {
			return "", fmt.Errorf("user %s may not create roles, and the tests connect as a role pgtest creates, "+
				"with only DML on the tables of their schemas: connect as a superuser or a user with CREATEROLE", user)
		}
		stmt := `CREATE ROLE ` + pq.QuoteIdentifier(r.name) + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS`
		if r.password != "" {
			stmt += ` PASSWORD ` + pq.QuoteLiteral(r.password)
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return "", fmt.Errorf("create role %s: %w", r.name, err)
		}
	case err != nil:
		return "", fmt.Errorf("read role %s: %w", r.name, err)
	case more:
		return "", fmt.Errorf("role %s exists with more than LOGIN (an attribute, a membership, or no LOGIN): drop it", r.name)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("create role %s: %w", r.name, err)
	}

	u, err := url.Parse(ownerURL)
	if err != nil {
		return "", err
	}
	u.User = url.User(r.name)
	if r.password != "" {
		u.User = url.UserPassword(r.name, r.password)
	}
	app := u.String()
	db, err := sql.Open("postgres", app)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return "", fmt.Errorf("connect as %s, the role the tests run as (the server must let it in over the owner's "+
			"host and database, with its password): %w", r.name, err)
	}
	return app, nil
}

// Tx begins a transaction on the shared pool, as the application role, and
// rolls it back when the test ends: for pure SQL logic that needs no commit.
func Tx(tb testing.TB) *sql.Tx {
	tb.Helper()
	tx, err := DB(tb).BeginTx(tb.Context(), nil)
	if err != nil {
		tb.Fatalf("pgtest: begin: %v", err)
	}
	tb.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// RowVersions returns the row version (xmin and xmax) of each row of the
// outbox of schema that matches where, by id: a row that a statement
// locked or updated since has another.
func RowVersions(tb testing.TB, db *sql.DB, schema, where string) map[string]string {
	tb.Helper()
	rows, err := db.QueryContext(tb.Context(), `SELECT id, xmin::text || ':' || xmax::text FROM "`+schema+`".outbox WHERE `+where)
	if err != nil {
		tb.Fatalf("pgtest: row versions: %v", err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var id, v string
		if err := rows.Scan(&id, &v); err != nil {
			tb.Fatalf("pgtest: row versions: %v", err)
		}
		m[id] = v
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("pgtest: row versions: %v", err)
	}
	return m
}

// Prepare prepares query with the parameter types (as PREPARE takes them:
// "(text, int)") in tx, under a name of its own that it returns, and
// deallocates it when the test ends. A prepared statement belongs to the
// session, not to the transaction: it outlives tx's rollback on the
// shared pool's connection, where a later PREPARE of the same name by
// another test would fail.
func Prepare(tb testing.TB, tx *sql.Tx, types, query string) string {
	tb.Helper()
	name := "p_" + strings.ToLower(rand.Text()[:10])
	if _, err := tx.ExecContext(tb.Context(), `PREPARE `+name+types+` AS `+query); err != nil {
		tb.Fatalf("pgtest: prepare: %v", err)
	}
	// Before the rollback (cleanups run last first); in a transaction
	// in error it fails, and the unique name then harms nobody.
	tb.Cleanup(func() { _, _ = tx.ExecContext(context.Background(), `DEALLOCATE `+name) })
	return name
}

// RequireOnePlan prepares query with the parameter types (as PREPARE
// takes them: "(text, int)"), runs it ten times with each of args (SQL
// literals, "'a', 1") in turn, and fails tb unless the server planned it
// at most the five times it tries before it keeps one generic plan: what
// a driver that prepares statements, as pgx does, then gets. It runs in a
// transaction that is rolled back.
func RequireOnePlan(tb testing.TB, query, types string, args []string) {
	tb.Helper()
	tx := Tx(tb)
	name := Prepare(tb, tx, types, query)
	for i := range 10 {
		rows, err := tx.QueryContext(tb.Context(), `EXECUTE `+name+`(`+args[i%len(args)]+`)`)
		if err != nil {
			tb.Fatalf("pgtest: execute: %v", err)
		}
		_ = rows.Close()
	}
	var generic, custom int
	if err := tx.QueryRowContext(tb.Context(),
		`SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1`, name).Scan(&generic, &custom); err != nil {
		tb.Fatalf("pgtest: read the plans: %v", err)
	}
	if custom > 5 {
		tb.Fatalf("the server planned the statement %d times for 10 runs (%d generic plans): a plan that knows the parameters costs less than one that does not", custom, generic)
	}
}

// Plan is a node of a statement's plan as EXPLAIN (FORMAT JSON) gives it,
// with the estimates tests read, and the nodes below it.
type Plan struct {
	Type     string  `json:"Node Type"`
	Relation string  `json:"Relation Name"`
	Index    string  `json:"Index Name"`
	Cond     string  `json:"Index Cond"`
	Rows     float64 `json:"Plan Rows"`
	Cost     float64 `json:"Total Cost"`
	Plans    []Plan  `json:"Plans"`
}

// Explain plans stmt with args in tx (EXPLAIN (FORMAT JSON), so nothing
// runs) and returns the plan, and its JSON for failure messages.
func Explain(tb testing.TB, tx *sql.Tx, stmt string, args ...any) (Plan, []byte) {
	tb.Helper()
	var raw []byte
	if err := tx.QueryRowContext(tb.Context(), `EXPLAIN (FORMAT JSON) `+stmt, args...).Scan(&raw); err != nil {
		tb.Fatalf("pgtest: explain: %v", err)
	}
	var plan []struct{ Plan Plan }
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		tb.Fatalf("pgtest: read the plan (%v): %s", err, raw)
	}
	return plan[0].Plan, raw
}

// Walk calls f for n and for every node below it, parents first.
func (n Plan) Walk(f func(Plan)) {
	f(n)
	for _, child := range n.Plans {
		child.Walk(f)
	}
}
