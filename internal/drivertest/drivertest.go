// Package drivertest runs the library's tests on each PostgreSQL driver a
// service may use: lib/pq, and pgx v5 (its pool through
// stdlib.OpenDBFromPool, its own transactions through dbtx/pgxtx, LISTEN
// through relay/pgxlisten). A test of a guarantee runs once per driver with
// Run, and takes from the Driver it is given its pools, its relay's
// Listener and its staging transactions.
package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq" // the "postgres" driver of sql.Open

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/dbtx/pgxtx"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pgxlisten"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

// Driver is one of the drivers the tests run on.
type Driver string

// The drivers.
const (
	PQ  Driver = "pq"  // lib/pq: sql.Open("postgres"), pqlisten
	PGX Driver = "pgx" // pgx v5: a pgxpool, stdlib.OpenDBFromPool, pgxtx, pgxlisten
)

// All is every driver, lib/pq first.
var All = []Driver{PQ, PGX}

// Run runs f as a subtest named after each driver, in parallel.
func Run(t *testing.T, f func(t *testing.T, d Driver)) {
	t.Helper()
	for _, d := range All {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			f(t, d)
		})
	}
}

// DB is a pool of a driver: the *sql.DB the relay and the dispatcher take,
// and on pgx the pgxpool under it.
type DB struct {
	*sql.DB
	Pool *pgxpool.Pool // nil on lib/pq
}

// Open returns a pool of at most conns connections that connects with dsn
// through d, all kept idle between uses and closed when the test ends. On
// pgx the pgxpool keeps them: a *sql.DB that kept its own idle would hold
// the pgxpool's connections, and InTx and Execer, which take theirs from
// the pgxpool, would wait for ever once the *sql.DB had used them all.
func (d Driver) Open(tb testing.TB, dsn string, conns int) *DB {
	tb.Helper()
	db, err := d.OpenDB(dsn, conns)
	if err != nil {
		tb.Fatalf("drivertest: %v", err)
	}
	tb.Cleanup(db.Close)
	return db
}

// OpenDB is Open for a process that is no test (a test's child relay): the
// caller closes the pool.
func (d Driver) OpenDB(dsn string, conns int) (*DB, error) {
	if d != PGX {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		return &DB{DB: db}, nil
	}
	cfg, err := pgxpool.ParseConfig(pgxDSN(dsn))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool) // keeps no idle connection of its own
	db.SetMaxOpenConns(conns)
	return &DB{DB: db, Pool: pool}, nil
}

// Close closes the pool.
func (db *DB) Close() {
	_ = db.DB.Close()
	if db.Pool != nil {
		db.Pool.Close()
	}
}

// Listener returns the relay's LISTEN session through d, connecting with
// dsn.
func (d Driver) Listener(tb testing.TB, dsn string) relay.Listener {
	tb.Helper()
	l, err := d.NewListener(dsn)
	if err != nil {
		tb.Fatalf("drivertest: %v", err)
	}
	return l
}

// NewListener is Listener for a process that is no test.
func (d Driver) NewListener(dsn string) (relay.Listener, error) {
	if d != PGX {
		return pqlisten.New(dsn), nil
	}
	cfg, err := pgx.ParseConfig(pgxDSN(dsn))
	if err != nil {
		return nil, err
	}
	return pgxlisten.New(cfg), nil
}

// InTx runs fn in a transaction of the driver's own kind, a *sql.Tx on
// lib/pq and a pgx.Tx on pgx (as a dbtx.Execer through pgxtx), and commits
// it when fn returns nil; otherwise it rolls it back and returns fn's error.
func (db *DB) InTx(ctx context.Context, fn func(tx dbtx.Execer) error) error {
	if db.Pool == nil {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit()
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(pgxtx.Wrap(tx)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// For returns the driver of the Run subtest that t is, or is under, and
// PQ outside Run: so that a test's setup helper, called from any depth of
// subtests, opens the pools of the driver its test runs on. A subtest of
// Run called twice under one parent is named "pgx#01": its driver is pgx.
func For(t testing.TB) Driver {
	for _, part := range strings.Split(t.Name(), "/")[1:] {
		name, _, _ := strings.Cut(part, "#")
		if d := Driver(name); slices.Contains(All, d) {
			return d
		}
	}
	return PQ
}

// Execer returns the pool as a dbtx.Execer of the driver's own kind, for
// staging outside a transaction: the *sql.DB on lib/pq, the pgxpool
// through pgxtx on pgx.
func (db *DB) Execer() dbtx.Execer {
	if db.Pool == nil {
		return db.DB
	}
	return pgxtx.Wrap(db.Pool)
}

// pgxDSN returns the URL dsn with its query's spaces as %20: net/url
// encodes them as '+', which lib/pq reads as a space and pgx does not
// (options=-c+search_path%3D).
func pgxDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.RawQuery == "" {
		return dsn
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return dsn
	}
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// Pipeline returns the relay's Config.Pipeline of d: pgxtx.Pipeline on
// pgx, and none on lib/pq.
func (d Driver) Pipeline() dbtx.Pipeline {
	if d != PGX {
		return nil
	}
	return pgxtx.Pipeline
}
