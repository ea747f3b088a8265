package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtemp"
	"github.com/tidings-go/tidings/internal/testwait"
)

func TestTitleKind(t *testing.T) {
	for title, want := range map[string]procKind{
		"postgres: checkpointer ":                        kindBackground,
		"postgres: background writer ":                   kindBackground,
		"postgres: walwriter ":                           kindBackground,
		"postgres: logical replication launcher ":        kindBackground,
		"postgres: autovacuum launcher ":                 kindAutovacuum,
		"postgres: autovacuum worker bench":              kindAutovacuum,
		"postgres: 15/main: autovacuum worker bench":     kindAutovacuum,
		"postgres: 15/main: checkpointer ":               kindBackground,
		"postgres: tidings bench [local] idle":           kindSession,
		"postgres: 15/main: tidings bench ::1(5) idle":   kindSession,
		"postgres: tidings bench 127.0.0.1(4321) UPDATE": kindSession,
	} {
		require.Equal(t, want, titleKind(title), "%q", title)
	}
}

// The server's CPU counts for the kind of process that spent it, the part
// a session spent after the last sample that saw it alive included: an
// autovacuum worker lives for a pass, often a part of a window, and what
// it spent would otherwise count for nobody's kind.
func TestServerCPUCountsForTheKindOfProcess(t *testing.T) {
	c, err := pgtemp.Start(t.Context(), &pgtemp.Options{Settings: map[string]string{"autovacuum": "off"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	db, err := sql.Open("postgres", c.URL())
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxIdleConns(0) // a session returned to the pool ends
	postmaster := findPostmaster(t.Context(), db)
	require.NotZero(t, postmaster, "the postmaster of the test's cluster")

	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	var backend int
	require.NoError(t, conn.QueryRowContext(t.Context(), `SELECT pg_backend_pid()`).Scan(&backend))
	cpuOf := func() int64 {
		st, ok := procStat(backend)
		require.True(t, ok, "the session's process %d", backend)
		return int64(st.utime + st.stim)
	}
	before := cpuOf()
	tracker := newServerTracker(postmaster) // the last sample to see the session
	var spent int64
	for deadline := time.Now().Add(testwait.Within); spent < 20; spent = cpuOf() - before {
		require.True(t, time.Now().Before(deadline), "the session spent %d of 20 ticks of CPU within %s", spent, testwait.Within)
		_, err := conn.ExecContext(t.Context(), `SELECT count(*) FROM generate_series(1, 1000000)`)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(backend)))
		return os.IsNotExist(err)
	}, testwait.Within, 5*time.Millisecond, "the session's process %d to exit", backend)

	ticks := tracker.sample()
	require.GreaterOrEqual(t, ticks[kindSession], spent, "the sessions' ticks against what the session spent; all: %v", ticks)
	require.Less(t, ticks[kindBackground], spent, "the background's ticks against what the session spent; all: %v", ticks)
}
