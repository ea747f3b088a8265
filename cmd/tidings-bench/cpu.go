package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	start   time.Time
	self    time.Duration
	server  *serverTracker
	from    kindTicks
	machine jiffies
}

// cpuUse is the CPU of an interval, in cores (CPU seconds per second).
type cpuUse struct {
	self, server float64
	serverKnown  bool
	// The whole machine's, and of it the time a hypervisor gave other
	// machines while this one had work to run (steal); and what it left
	// idle (with the time its processes waited for I/O).
	machine, steal, idle float64
	// Of server: autovacuum's, and the background processes' (the
	// checkpointer, the background and WAL writers, the postmaster). The
	// rest is the client sessions'. The split holds when the server's
	// processes were sampled more often than autovacuum's workers come and
	// go (sampleWindows); a worker that came and went between two samples
	// counts as background.
	autovacuum, background float64
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
	return &cpuMeter{start: time.Now(), self: selfCPU(), server: newServerTracker(postmaster), machine: machineJiffies()}
}

// stop returns the use since startCPU, or since its last call: a meter
// may measure one interval after another.
func (m *cpuMeter) stop() cpuUse {
	now := time.Now()
	secs := now.Sub(m.start).Seconds()
	self := selfCPU()
	j := machineJiffies()
	u := cpuUse{self: (self - m.self).Seconds() / secs}
	if j.all > m.machine.all {
		cores := func(to, from uint64) float64 {
			return float64(to-from) / float64(j.all-m.machine.all) * float64(numCPU())
		}
		u.machine, u.steal = cores(j.busy, m.machine.busy), cores(j.steal, m.machine.steal)
		u.idle = cores(j.all-j.busy, m.machine.all-m.machine.busy)
	}
	if m.server.postmaster != 0 {
		to := m.server.sample()
		cores := func(k procKind) float64 {
			return float64(to[k]-m.from[k]) / clockTicks / secs
		}
		u.autovacuum, u.background = cores(kindAutovacuum), cores(kindBackground)
		u.server = cores(kindSession) + u.autovacuum + u.background
		u.serverKnown = true
		m.from = to
	}
	m.start, m.self, m.machine = now, self, j
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

// machineJiffies returns the jiffies of all CPUs: busy (stolen
// included), stolen, and all.
func machineJiffies() (j jiffies) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return j
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		if i >= 8 { // guest times are already in user and nice
			break
		}
		j.all += v
		if i != 3 && i != 4 { // idle, iowait
			j.busy += v
		}
		if i == 7 {
			j.steal = v
		}
	}
	return j
}

// jiffies are what machineJiffies counts.
type jiffies struct{ busy, steal, all uint64 }

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

// procKind is what a server process does, for the split of the server's
// CPU.
type procKind int

const (
	kindSession    procKind = iota // a client's backend
	kindAutovacuum                 // autovacuum's launcher and workers
	kindBackground                 // the postmaster and every other process it starts
	kinds
)

// kindTicks is CPU time by kind of process, in clock ticks.
type kindTicks [kinds]int64

// serverTracker follows the postmaster's children from one sample to the
// next, so that the CPU of each counts for its kind. A child that exited
// since the last sample left the rest of its CPU in the postmaster's
// total of reaped children: it counts for the kind of the children that
// exited, or as background when they were of more than one kind.
type serverTracker struct {
	postmaster int
	children   map[int]child // the ones alive at the last sample, by pid
	own        int64         // the postmaster's own CPU at the last sample
	reaped     int64         // its reaped children's at the last sample
	ticks      kindTicks     // counted since the first sample
}

type child struct {
	kind  procKind
	ticks int64 // at the last sample
}

// newServerTracker takes the first sample, from which the others count;
// a postmaster of 0 (a server elsewhere) gives a tracker that counts
// nothing.
func newServerTracker(postmaster int) *serverTracker {
	t := &serverTracker{postmaster: postmaster, children: map[int]child{}}
	t.sample()
	t.ticks = kindTicks{}
	return t
}

// sample reads the server's processes and returns the CPU counted so far.
func (t *serverTracker) sample() kindTicks {
	if t.postmaster == 0 {
		return t.ticks
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return t.ticks
	}
	alive := make(map[int]child, len(t.children))
	reaped := t.reaped
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		switch {
		case !ok:
		case pid == t.postmaster:
			own := int64(st.utime + st.stim)
			t.ticks[kindBackground] += own - t.own
			t.own, reaped = own, int64(st.cutime+st.cstime)
		case st.ppid == t.postmaster:
			c, seen := t.children[pid]
			if !seen {
				c.kind = procKindOf(pid)
			}
			now := int64(st.utime + st.stim)
			t.ticks[c.kind] += now - c.ticks
			c.ticks = now
			alive[pid] = c
		}
	}
	// What the exited children had not shown at their last sample.
	rest, kind := reaped-t.reaped, procKind(-1)
	for pid, c := range t.children {
		if _, ok := alive[pid]; ok {
			continue
		}
		rest -= c.ticks
		switch {
		case kind < 0:
			kind = c.kind
		case kind != c.kind:
			kind = kindBackground
		}
	}
	if kind < 0 {
		kind = kindBackground // a child born and gone between two samples
	}
	t.ticks[kind] += rest
	t.children, t.reaped = alive, reaped
	return t.ticks
}

// procKindOf tells a server process's kind by its title; a process gone
// counts as a session.
func procKindOf(pid int) procKind {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return kindSession
	}
	title, _, _ := strings.Cut(string(b), "\x00")
	return titleKind(title)
}

// titleKind tells a server process's kind by the title PostgreSQL gives
// it: "postgres: [cluster: ]checkpointer", "postgres: autovacuum worker
// db", "postgres: user db [local] idle".
func titleKind(title string) procKind {
	title, _ = strings.CutPrefix(title, "postgres: ")
	if cluster, rest, ok := strings.Cut(title, ": "); ok && !strings.Contains(cluster, " ") {
		title = rest
	}
	switch {
	case strings.HasPrefix(title, "autovacuum "):
		return kindAutovacuum
	case slices.ContainsFunc(backgroundTitles, func(p string) bool { return strings.HasPrefix(title, p) }):
		return kindBackground
	}
	return kindSession
}

// backgroundTitles begin the titles of PostgreSQL's background processes
// but autovacuum's.
var backgroundTitles = []string{"checkpointer", "background writer", "walwriter", "logical replication", "archiver"}

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
