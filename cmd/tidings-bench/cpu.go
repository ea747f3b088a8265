package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc CPU times on Linux.
const clockTicks = 100

// cpuMeter tells where the CPU time of an interval went: this process,
// the PostgreSQL server (when it runs on this machine and /proc shows its
// processes), and the whole machine.
type cpuMeter struct {
	postmaster int // 0 when unknown
	start      time.Time
	self       time.Duration
	server     time.Duration
	busy, all  uint64 // machine jiffies
}

// cpuUse is the CPU of an interval, in cores (CPU seconds per second).
type cpuUse struct {
	self, server, machine float64
	serverKnown           bool
}

// findPostmaster returns the pid of the server's postmaster when it runs
// on this machine: the parent of this session's backend.
func findPostmaster(ctx context.Context, db *sql.DB) int {
	var backend int
	if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	st, ok := procStat(backend)
	if !ok || st.comm != "postgres" {
		return 0
	}
	return st.ppid
}

func startCPU(postmaster int) *cpuMeter {
	m := &cpuMeter{postmaster: postmaster, start: time.Now(), self: selfCPU()}
	m.server = serverCPU(postmaster)
	m.busy, m.all = machineJiffies()
	return m
}

// stop returns the use since startCPU.
func (m *cpuMeter) stop() cpuUse {
	secs := time.Since(m.start).Seconds()
	busy, all := machineJiffies()
	u := cpuUse{self: (selfCPU() - m.self).Seconds() / secs}
	if all > m.all {
		u.machine = float64(busy-m.busy) / float64(all-m.all) * float64(numCPU())
	}
	if m.postmaster != 0 {
		u.server = (serverCPU(m.postmaster) - m.server).Seconds() / secs
		u.serverKnown = true
	}
	return u
}

func numCPU() int {
	n := 0
	b, _ := os.ReadFile("/proc/stat")
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "cpu") && !strings.HasPrefix(line, "cpu ") {
			n++
		}
	}
	return max(n, 1)
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineJiffies returns busy and total jiffies of all CPUs.
func machineJiffies() (busy, all uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		if i >= 8 { // guest times are already in user and nice
			break
		}
		all += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, all
}

type stat struct {
	comm           string
	ppid           int
	utime, stim    uint64
	cutime, cstime uint64 // of the children it waited for
}

func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, false
	}
	s := string(b)
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close < open {
		return stat{}, false
	}
	f := strings.Fields(s[close+1:])
	if len(f) < 15 {
		return stat{}, false
	}
	st := stat{comm: s[open+1 : close]}
	st.ppid, _ = strconv.Atoi(f[1])
	st.utime, _ = strconv.ParseUint(f[11], 10, 64)
	st.stim, _ = strconv.ParseUint(f[12], 10, 64)
	st.cutime, _ = strconv.ParseUint(f[13], 10, 64)
	st.cstime, _ = strconv.ParseUint(f[14], 10, 64)
	return st, true
}

// serverCPU sums the CPU time of the postmaster and its children: those
// alive now, and those it has reaped (its cutime and cstime).
func serverCPU(postmaster int) time.Duration {
	if postmaster == 0 {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks uint64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		switch {
		case !ok:
		case pid == postmaster:
			ticks += st.utime + st.stim + st.cutime + st.cstime
		case st.ppid == postmaster:
			ticks += st.utime + st.stim
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// dbMeter counts what the server did in an interval: transaction ids
// assigned (write transactions, each a commit that waits for its WAL
// flush, or a rollback) and WAL written, both server-wide and exact.
type dbMeter struct {
	db  *sql.DB
	xid int64
	lsn string
}

// dbUse is a dbMeter's interval.
type dbUse struct {
	writeTx    int64
	walBytes   int64
	rowUpdates int64 // of the outbox; -1 when not read
}

func startDB(ctx context.Context, db *sql.DB) (*dbMeter, error) {
	m := &dbMeter{db: db}
	err := db.QueryRowContext(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_lsn()::text`).
		Scan(&m.xid, &m.lsn)
	return m, err
}

func (m *dbMeter) stop(ctx context.Context) (dbUse, error) {
	u := dbUse{rowUpdates: -1}
	var xid int64
	err := m.db.QueryRowContext(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
			pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, m.lsn).Scan(&xid, &u.walBytes)
	u.writeTx = xid - m.xid
	return u, err
}

// outboxUpdates reads how many row updates the schema's outbox has had,
// once the sessions that made them have ended (a session sends its table
// counts to the statistics when it ends, or up to ten seconds after it
// went idle): it waits until the count holds still.
func outboxUpdates(ctx context.Context, db *sql.DB, s benchSchema) (int64, error) {
	var last int64 = -1
	for range 100 {
		var n int64
		if err := db.QueryRowContext(ctx, `SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables
			WHERE schemaname = $1 AND relname = 'outbox'`, s.name).Scan(&n); err != nil {
			return 0, fmt.Errorf("row updates: %w", err)
		}
		if n == last {
			return n, nil
		}
		last = n
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return last, nil
}
