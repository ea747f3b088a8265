package tcpproxy_test

import (
	"context"
	"database/sql"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
	"github.com/tidings-go/tidings/internal/tcpproxy"
	"github.com/tidings-go/tidings/internal/testwait"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

type testBundle struct {
	proxy  *tcpproxy.Proxy
	db     *sql.DB // through the proxy
	direct *sql.DB // straight to the server
	table  string  // a table of the test's own: n int
}

func setup(t *testing.T) testBundle {
	t.Helper()
	schema := pgtest.Schema(t, func(ctx context.Context, db *sql.DB, schema string) error {
		_, err := db.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"; CREATE TABLE "`+schema+`".t (n int)`)
		return err
	})
	proxy, dsn := tcpproxy.StartFor(t, pgtest.URL(t))
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return testBundle{proxy: proxy, db: db, direct: pgtest.DB(t), table: `"` + schema + `".t`}
}

func (b testBundle) rows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.direct.QueryRowContext(t.Context(), `SELECT count(*) FROM `+b.table).Scan(&n))
	return n
}

// conn is one session through the proxy, closed when the test ends.
func (b testBundle) conn(t *testing.T) *sql.Conn {
	t.Helper()
	c, err := b.db.Conn(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func fired(t *testing.T, ch <-chan struct{}) bool {
	t.Helper()
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestForwards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var n int
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT $1::int + 1`, 41).Scan(&n))
	require.Equal(t, 42, n)
	_, err := b.db.ExecContext(t.Context(), `INSERT INTO `+b.table+` (n) SELECT generate_series(1, 1000)`)
	require.NoError(t, err)
	var sum int
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT sum(n) FROM `+b.table).Scan(&sum))
	require.Equal(t, 500500, sum)
	// A large message both ways.
	big := strings.Repeat("x", 1<<20)
	var got string
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT $1::text`, big).Scan(&got))
	require.Equal(t, big, got)
	require.GreaterOrEqual(t, b.proxy.Accepted(), 1)
	require.GreaterOrEqual(t, b.proxy.Open(), 1)
}

func TestSSLRequestIsAnsweredAndForwarded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse("postgres://" + b.proxy.Addr())
	require.NoError(t, err)
	base, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	q := base.Query()
	q.Set("sslmode", "prefer") // asks for TLS first; the test server says no
	base.Host, base.RawQuery = u.Host, q.Encode()
	db, err := sql.Open("postgres", base.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT 7`).Scan(&n))
	require.Equal(t, 7, n)
}

func TestCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.conn(t)
	require.NoError(t, c.PingContext(t.Context()))
	require.GreaterOrEqual(t, b.proxy.Cut(), 1)
	var n int
	require.Error(t, c.QueryRowContext(t.Context(), `SELECT 1`).Scan(&n), "the session is gone")
	require.Eventually(t, func() bool { return b.proxy.Open() == 0 }, 5*time.Second, 5*time.Millisecond)
	// New sessions go through as before.
	require.NoError(t, b.db.QueryRowContext(t.Context(), `SELECT 1`).Scan(&n))
}

func TestStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.conn(t)
	require.NoError(t, c.PingContext(t.Context()))
	b.proxy.Stall(true)
	done := make(chan error, 1)
	go func() {
		var n int
		err := c.QueryRowContext(context.Background(), `INSERT INTO `+b.table+` (n) VALUES (1) RETURNING n`).Scan(&n)
		done <- err
	}()
	// The query reaches the proxy and is held there.
	require.Eventually(t, func() bool { return b.proxy.Held() > 0 }, 10*time.Second, time.Millisecond,
		"the query held by the stalled proxy")
	select {
	case err := <-done:
		t.Fatalf("a query went through a stalled proxy: %v", err)
	default:
	}
	require.Zero(t, b.rows(t), "the server never saw the query")
	require.Equal(t, 1, b.proxy.Open(), "the connection stays open")
	b.proxy.Stall(false)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the query did not finish after the stall")
	}
	require.Equal(t, 1, b.rows(t))
}

func TestStalledConnectionsAreReleasedWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	done := make(chan error, 1)
	// Cleanups run last first: this check runs after the pool is closed,
	// which runs after the proxy's own cleanup.
	t.Cleanup(func() {
		select {
		case err := <-done:
			require.Error(t, err, "the stalled session was cut")
		case <-time.After(10 * time.Second):
			t.Error("the stalled session was not cut")
		}
	})
	var db *sql.DB
	t.Cleanup(func() { _ = db.Close() })
	proxy, dsn := tcpproxy.StartFor(t, pgtest.URL(t))
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	c, err := db.Conn(t.Context())
	require.NoError(t, err)
	require.NoError(t, c.PingContext(t.Context()))
	proxy.Stall(true)
	go func() {
		err := c.PingContext(context.Background())
		_ = c.Close()
		done <- err
	}()
	require.Eventually(t, func() bool { return proxy.Held() > 0 }, 10*time.Second, time.Millisecond,
		"the ping is stalled before the test ends")
}

// A transaction's COMMIT, cut just before the server gets it, rolls back;
// cut just after, commits; either way the client gets an error. The trap
// fires once.
func TestCutOnQueryCommit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		when tcpproxy.When
		rows int
	}{{tcpproxy.Before, 0}, {tcpproxy.After, 1}} {
		t.Run(tc.when.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			trap := b.proxy.CutOnQuery(tcpproxy.Query("commit"), tc.when)
			tx, err := b.db.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(t.Context(), `INSERT INTO `+b.table+` (n) VALUES ($1)`, 1)
			require.NoError(t, err)
			require.False(t, fired(t, trap), "not at BEGIN or INSERT")
			require.Error(t, tx.Commit(), "the client never hears the answer")
			// The proxy closes the client before it marks the trap fired.
			testwait.Recv(t, trap, "the trap to fire")
			// The server ends the session when it reads the end of its input;
			// then the transaction is settled either way.
			require.Eventually(t, func() bool { return b.proxy.Open() == 0 }, 10*time.Second, 5*time.Millisecond)
			require.Equal(t, tc.rows, b.rows(t))

			// One shot: the next commit goes through.
			tx, err = b.db.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(t.Context(), `INSERT INTO `+b.table+` (n) VALUES ($1)`, 2)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			require.Equal(t, tc.rows+1, b.rows(t))
		})
	}
}

// An autocommit statement with parameters goes by the extended protocol
// (Parse, Describe, Sync; then Bind, Execute, Sync): cut before its Parse
// it never runs; cut after its Execute's Sync it ran and committed.
func TestCutOnQueryExtended(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		when tcpproxy.When
		rows int
	}{{tcpproxy.Before, 0}, {tcpproxy.After, 1}} {
		t.Run(tc.when.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			insert := `INSERT INTO ` + b.table + ` (n) VALUES ($1)`
			trap := b.proxy.CutOnQuery(func(q string) bool { return q == insert }, tc.when)
			c := b.conn(t) // one session: database/sql does not retry it elsewhere
			require.NoError(t, c.PingContext(t.Context()))
			_, err := c.ExecContext(t.Context(), insert, 1)
			require.Error(t, err)
			testwait.Recv(t, trap, "the trap to fire")
			require.Eventually(t, func() bool { return b.proxy.Open() == 0 }, 10*time.Second, 5*time.Millisecond)
			require.Equal(t, tc.rows, b.rows(t))
		})
	}
}

func TestQuery(t *testing.T) {
	t.Parallel()
	m := tcpproxy.Query("COMMIT")
	for _, q := range []string{"COMMIT", "commit", " Commit ;", "COMMIT;"} {
		require.True(t, m(q), q)
	}
	for _, q := range []string{"COMMIT PREPARED 'x'", "ROLLBACK", "", "SELECT 'COMMIT'"} {
		require.False(t, m(q), q)
	}
}

// TestRefuseClosesConnectionsStillDialling refuses while connections are
// being set up: each one is closed, including one whose dial to the
// target was under way when Refuse cut the open ones. The race is
// narrow, so the test tries many times; with Refuse right, every try
// passes.
func TestRefuseClosesConnectionsStillDialling(t *testing.T) {
	t.Parallel()
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held sync.WaitGroup // the accepting goroutine and each connection's
	t.Cleanup(held.Wait)    // after the listener's close, below
	t.Cleanup(func() { _ = target.Close() })
	held.Go(func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			// Held open: only the proxy's cut ends the client's connection.
			held.Go(func() {
				_, _ = io.Copy(io.Discard, c)
				_ = c.Close()
			})
		}
	})
	proxy := tcpproxy.Start(t, target.Addr().String())
	for i := range 200 {
		c, err := net.Dial("tcp", proxy.Addr())
		require.NoError(t, err)
		time.Sleep(time.Duration(i%5) * 50 * time.Microsecond) // where in the dial Refuse lands, not a wait
		proxy.Refuse(true)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = c.Read(make([]byte, 1))
		_ = c.Close()
		require.ErrorIs(t, err, io.EOF, "try %d: a connection made before Refuse is closed", i)
		proxy.Refuse(false)
	}
}
