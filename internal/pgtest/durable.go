package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/tidings-go/tidings/internal/pgtemp"
)

// EnvBenchURL names a server for benchmarks to use instead of the durable
// throwaway cluster. It must have fsync, synchronous_commit and
// full_page_writes on.
const EnvBenchURL = "TIDINGS_BENCH_DATABASE_URL"

var (
	durableMu      sync.Mutex
	durableCluster *pgtemp.Cluster
	durableBase    string
)

// DurableURL returns a connection string of the benchmark server: a second
// throwaway cluster per test binary, started on first use with fsync and
// synchronous_commit on as production has them, or the server
// TIDINGS_BENCH_DATABASE_URL names. Its sessions are the server's owner's
// (benchmarks migrate schemas of their own) and have an empty search_path.
// It fails tb when the server does not flush its commits, so no figure is
// ever measured with durability off. Main stops the cluster.
func DurableURL(tb testing.TB) string {
	tb.Helper()
	durableMu.Lock()
	defer durableMu.Unlock()
	if durableBase != "" {
		return durableBase
	}
	raw := os.Getenv(EnvBenchURL)
	if raw != "" {
		if _, err := url.Parse(raw); err != nil {
			tb.Fatalf("pgtest: %s is not a URL: %v", EnvBenchURL, err)
		}
	} else {
		c, err := pgtemp.Start(context.Background(), &pgtemp.Options{Durable: true})
		if err != nil {
			tb.Fatalf("pgtest: durable cluster: %v", err)
		}
		durableCluster, raw = c, c.URL()
	}
	dsn := withEmptySearchPath(tb, raw)
	if err := checkDurable(dsn); err != nil {
		tb.Fatalf("pgtest: benchmark server: %v", err)
	}
	durableBase = dsn
	return durableBase
}

// checkDurable fails unless the server flushes every commit to disk.
func checkDurable(dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for setting, bad := range map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"} {
		var v string
		if err := db.QueryRowContext(context.Background(), "SELECT current_setting($1)", setting).Scan(&v); err != nil {
			return fmt.Errorf("read %s: %w", setting, err)
		}
		if v == bad {
			return fmt.Errorf("%s is %s; benchmarks need a durable server", setting, v)
		}
	}
	return nil
}

// stopDurable stops the durable cluster, if DurableURL started one.
func stopDurable() {
	durableMu.Lock()
	defer durableMu.Unlock()
	if durableCluster != nil {
		_ = durableCluster.Stop()
		durableCluster = nil
	}
}

// DurablePool opens a pool of conns connections on the durable server
// (DurableURL), all kept idle between uses and opened now, before the
// caller's timed work; it closes when tb ends.
func DurablePool(tb testing.TB, conns int) *sql.DB {
	tb.Helper()
	db, err := sql.Open("postgres", DurableURL(tb))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	held := make([]*sql.Conn, conns)
	for i := range held {
		if held[i], err = db.Conn(context.Background()); err != nil {
			tb.Fatalf("pgtest: open the durable pool: %v", err)
		}
	}
	for _, c := range held {
		_ = c.Close()
	}
	return db
}
