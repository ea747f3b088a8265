package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver
	_ "github.com/lib/pq"              // the pq driver

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/dbtx/pgxtx"
	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/relay"
	"github.com/tidings-go/tidings/relay/pgxlisten"
	"github.com/tidings-go/tidings/relay/pqlisten"
)

// driver is the database/sql driver the benchmarks connect with.
type driver string

const (
	driverPgx driver = "pgx" // jackc/pgx/v5/stdlib
	driverPq  driver = "pq"  // lib/pq
)

// parseDriver reads -driver.
func parseDriver(s string) (driver, error) {
	switch d := driver(s); d {
	case driverPgx, driverPq:
		return d, nil
	}
	return "", fmt.Errorf("unknown driver %q: pgx or pq", s)
}

// open opens a pool of the driver, not yet connected.
func (d driver) open(dsn string) (*sql.DB, error) {
	if d == driverPq {
		return sql.Open("postgres", dsn)
	}
	return sql.Open("pgx", dsn)
}

// listener is the relay's LISTEN session through the driver.
func (d driver) listener(dsn string) (relay.Listener, error) {
	if d == driverPq {
		return pqlisten.New(dsn), nil
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse the URL for pgx: %w", err)
	}
	return pgxlisten.New(cc), nil
}

// pipeline is the relay's Config.Pipeline through the driver: pgx's
// batches, and none on lib/pq.
func (d driver) pipeline() dbtx.Pipeline {
	if d == driverPq {
		return nil
	}
	return pgxtx.Pipeline
}

// server is the PostgreSQL server the benchmarks run on, and the driver
// they reach it with.
type server struct {
	dsn    string
	driver driver
	desc   string // where it comes from, for the report
	stop   func() error
}

// openServer returns the server -database names, or a durable throwaway
// cluster.
func openServer(ctx context.Context, database string, drv driver) (server, error) {
	if database != "" {
		// Never print the URL: it may carry a password.
		return server{dsn: database, driver: drv, desc: "the server -database names", stop: func() error { return nil }}, nil
	}
	progress("no -database: starting a throwaway PostgreSQL cluster with fsync and synchronous_commit on (pgtemp, Durable: true)")
	c, err := pgtemp.Start(ctx, &pgtemp.Options{Durable: true})
	if err != nil {
		return server{}, fmt.Errorf("start a throwaway cluster: %w", err)
	}
	return server{
		dsn:    c.URL(),
		driver: drv,
		desc:   fmt.Sprintf("a throwaway local cluster (internal/pgtemp, Durable: true, loopback TCP port %d), removed on exit", c.Port()),
		stop:   c.Stop,
	}, nil
}

// serverSettings are the settings the report shows, in order.
var serverSettings = []string{
	"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
	"shared_buffers", "max_connections", "max_wal_size", "checkpoint_timeout", "autovacuum",
	"idle_in_transaction_session_timeout",
}

// readSettings reads serverSettings, the database's collation and the
// version string, and fails unless the server flushes every commit.
func readSettings(ctx context.Context, db *sql.DB) (version string, settings [][2]string, err error) {
	if err := db.QueryRowContext(ctx, `SELECT version()`).Scan(&version); err != nil {
		return "", nil, fmt.Errorf("read the server version: %w", err)
	}
	for _, name := range serverSettings {
		var v string
		if err := db.QueryRowContext(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			return "", nil, fmt.Errorf("read %s: %w", name, err)
		}
		settings = append(settings, [2]string{name, v})
		if (name == "fsync" || name == "synchronous_commit" || name == "full_page_writes") && v == "off" {
			return "", nil, fmt.Errorf("the server has %s off: figures measured without durability say nothing about production; use a server with fsync, synchronous_commit and full_page_writes on", name)
		}
	}
	// The outbox's and the inbox's text keys (a module, a lane, a
	// consumer) compare in the database's collation; the rules' keys byte
	// by byte.
	var collation string
	if err := db.QueryRowContext(ctx, `SELECT datcollate FROM pg_database WHERE datname = current_database()`).Scan(&collation); err != nil {
		return "", nil, fmt.Errorf("read the database's collation: %w", err)
	}
	settings = append(settings, [2]string{"the database's collation", collation})
	return version, settings, nil
}

// machine describes the computer the command runs on.
type machine struct {
	cpus     int
	model    string
	memTotal string
	kernel   string
	goVer    string
	load     string
}

func readMachine() machine {
	m := machine{cpus: runtime.NumCPU(), goVer: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	m.model = procField("/proc/cpuinfo", "model name")
	m.memTotal = procField("/proc/meminfo", "MemTotal")
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	m.load = loadAvg()
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// procField returns the value of the first "name: value" line of a /proc
// file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// progress writes a timestamped line to progressOut.
func progress(format string, args ...any) {
	fmt.Fprintf(progressOut, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// progressOut is where progress goes: stderr, or what a test reads.
var progressOut io.Writer = os.Stderr

// printHeader writes the machine and the server.
func printHeader(w io.Writer, m machine, srv server, version string, settings [][2]string) {
	fmt.Fprintln(w, "## Machine")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- CPUs: %d (%s)\n", m.cpus, m.model)
	fmt.Fprintf(w, "- memory: %s\n", m.memTotal)
	fmt.Fprintf(w, "- kernel: %s\n", m.kernel)
	fmt.Fprintf(w, "- Go: %s\n", m.goVer)
	fmt.Fprintf(w, "- load average at start: %s\n", m.load)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## PostgreSQL")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- server: %s\n", srv.desc)
	fmt.Fprintf(w, "- version: %s\n", version)
	for _, s := range settings {
		if s[0] != "server_version" {
			fmt.Fprintf(w, "- %s: %s\n", s[0], s[1])
		}
	}
	fmt.Fprintln(w)
}
