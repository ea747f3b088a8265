// Package pgtest gives tests a real PostgreSQL: one throwaway cluster per
// test binary (or the server TIDINGS_TEST_DATABASE_URL names), a shared
// pool, a fresh migrated schema per test, and a rolled-back transaction per
// test. Test connections have an empty search_path, so a query that forgets
// its schema fails loudly.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidings-go/tidings/internal/pgtemp"
)

// EnvURL names a server to use instead of a throwaway cluster.
const EnvURL = "TIDINGS_TEST_DATABASE_URL"

var (
	mu      sync.Mutex
	cluster *pgtemp.Cluster
	baseURL string
	shared  *sql.DB
	counter atomic.Int64
)

// Main runs the tests, stops the cluster, and fails the binary when a
// goroutine leaked. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if shared != nil {
		_ = shared.Close()
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

// URL returns a connection string of the test server, starting the
// throwaway cluster on first use. Its sessions have an empty search_path.
func URL(tb testing.TB) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if baseURL == "" {
		raw := os.Getenv(EnvURL)
		if raw == "" {
			c, err := pgtemp.Start(context.Background(), nil)
			if err != nil {
				tb.Fatalf("pgtest: %v", err)
			}
			cluster, raw = c, c.URL()
		}
		baseURL = withEmptySearchPath(tb, raw)
	}
	return baseURL
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

// DB returns the pool shared by the tests of this binary. Do not close it.
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
		shared = db
	}
	return shared
}

// Open returns a pool of its own, closed when the test ends: for tests that
// need their own limits or must not share sessions.
func Open(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("postgres", URL(tb))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// MigrateFunc installs the library's tables into schema.
type MigrateFunc func(ctx context.Context, db *sql.DB, schema string) error

// Schema creates a schema of its own for the test, migrates it with migrate
// and drops it when the test ends. Its name is the test binary's package
// plus the process id and a counter, so parallel tests and parallel test
// binaries never share one.
func Schema(tb testing.TB, migrate MigrateFunc) string {
	tb.Helper()
	db := DB(tb)
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	pkg = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(pkg))
	schema := fmt.Sprintf("t_%s_%d_%d", pkg, os.Getpid(), counter.Add(1))
	if err := migrate(tb.Context(), db, schema); err != nil {
		tb.Fatalf("pgtest: migrate %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		// Cleanup runs after the test's context is cancelled.
		if _, err := db.ExecContext(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// Tx begins a transaction on the shared pool and rolls it back when the
// test ends: for pure SQL logic that needs no commit.
func Tx(tb testing.TB) *sql.Tx {
	tb.Helper()
	tx, err := DB(tb).BeginTx(tb.Context(), nil)
	if err != nil {
		tb.Fatalf("pgtest: begin: %v", err)
	}
	tb.Cleanup(func() { _ = tx.Rollback() })
	return tx
}
