package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

// childFlag makes the command a relay child of the backlog scenario; its
// one argument is a childConfig in JSON.
const childFlag = "-child-relay"

// childConfig is what the backlog scenario tells its relay child.
type childConfig struct {
	DSN        string `json:"dsn"`
	Driver     driver `json:"driver"`
	Schema     string `json:"schema"`
	Expect     int    `json:"expect"`
	Commit     string `json:"commit"`
	Batch      int    `json:"batch"`
	Conc       int    `json:"concurrency"`
	Lane       int    `json:"lane_limit"`
	CPUProfile string `json:"cpuprofile,omitempty"`
}

// childReport is what the child prints once the backlog is drained.
type childReport struct {
	Delivered  int64   `json:"delivered"`
	Seconds    float64 `json:"seconds"` // start of Supervise to empty
	HeapSys    uint64  `json:"heap_sys"`
	Sys        uint64  `json:"sys"`
	NumGC      uint32  `json:"num_gc"`
	Goroutines int     `json:"goroutines"` // after Supervise returned
}

func childConfigArg(args []string) (string, bool) {
	if len(args) == 2 && args[0] == childFlag {
		return args[1], true
	}
	return "", false
}

// runChild drains the schema's backlog with a relay and a dispatcher,
// prints a childReport on stdout, and waits for stdin to close so the
// parent can read its peak RSS before it exits.
func runChild(ctx context.Context, arg string) error {
	var cc childConfig
	if err := json.Unmarshal([]byte(arg), &cc); err != nil {
		return fmt.Errorf("child: %w", err)
	}
	stopProfile, err := startProfile(cc.CPUProfile)
	if err != nil {
		return err
	}
	defer func() { _ = stopProfile() }()
	dc := drainConfig{commit: cc.Commit, batch: cc.Batch, conc: cc.Conc, lane: cc.Lane}
	db, err := openPool(ctx, cc.Driver, cc.DSN, relayPool)
	if err != nil {
		return err
	}
	defer db.Close()
	s := benchSchema{name: cc.Schema, q: pq.QuoteIdentifier(cc.Schema)}
	dl := &tally{want: int64(cc.Expect), done: make(chan struct{})}
	disp, err := dc.dispatcher(dl)
	if err != nil {
		return err
	}
	start := time.Now()
	l, err := cc.Driver.listener(cc.DSN)
	if err != nil {
		return err
	}
	rl := supervise(db, dc.relayConfig(s, cc.Driver, l), disp)
	select {
	case <-dl.done:
	case <-rl.exited:
		return fmt.Errorf("child: the relay stopped early: %w", rl.stop())
	case <-ctx.Done():
		_ = rl.stop()
		return ctx.Err()
	}
	if err := waitSettled(ctx, db, s, time.Minute, 5*time.Millisecond); err != nil {
		_ = rl.stop()
		return err
	}
	secs := time.Since(start).Seconds()
	if err := rl.stop(); err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep := childReport{Delivered: dl.total.Load(), Seconds: secs, HeapSys: ms.HeapSys, Sys: ms.Sys,
		NumGC: ms.NumGC, Goroutines: runtime.NumGoroutine()}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// memStatus reads VmRSS and VmHWM of pid in bytes.
func memStatus(pid int) (rss, hwm uint64, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.Lines(string(b)) {
		k, v, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n * 1024
		case "VmHWM":
			hwm = n * 1024
		}
	}
	return rss, hwm, true
}

// backlogResult is one backlog drain.
type backlogResult struct {
	drain   drainResult
	hwm     uint64 // peak RSS of the relay child
	rssMax  uint64 // largest VmRSS sampled
	report  childReport
	cpuSelf float64 // cores used by the child
	server  cpuUse
	db      dbUse
}

// backlogOnce stages size requests, drains them with the relay in a child
// process, and samples the child's memory.
func backlogOnce(ctx context.Context, cfg config, srv server, postmaster, size int, dc drainConfig, profile string) (backlogResult, error) {
	var r backlogResult
	db, err := openPool(ctx, srv.driver, srv.dsn, 4)
	if err != nil {
		return r, err
	}
	defer db.Close()
	s, err := newSchema(ctx, db, "backlog")
	if err != nil {
		return r, err
	}
	defer s.drop(db)
	progress("  staging %d requests", size)
	if _, err := stageBacklog(ctx, db, s, size, cfg.stageChunk, rulesOff); err != nil {
		return r, err
	}
	if err := prepareDrain(ctx, db, s); err != nil {
		return r, err
	}

	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	arg, err := json.Marshal(childConfig{DSN: srv.dsn, Driver: srv.driver, Schema: s.name, Expect: size, Commit: dc.commit,
		Batch: dc.batch, Conc: dc.conc, Lane: dc.lane, CPUProfile: profile})
	if err != nil {
		return r, err
	}
	cmd := exec.CommandContext(ctx, exe, childFlag, string(arg))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return r, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	progress("  draining %d requests in a child process: %s", size, dc)
	dbm, err := startDB(ctx, db)
	if err != nil {
		return r, err
	}
	meter := startCPU(postmaster)
	if err := cmd.Start(); err != nil {
		return r, err
	}
	pid := cmd.Process.Pid
	reported := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &r.report)
		}
		reported <- err
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var repErr error
sample:
	for {
		select {
		case repErr = <-reported:
			break sample
		case <-tick.C:
			if rss, _, ok := memStatus(pid); ok {
				r.rssMax = max(r.rssMax, rss)
			}
		}
	}
	// The child waits for stdin to close: its /proc entry is still there.
	r.server = meter.stop()
	rss, hwm, ok := memStatus(pid)
	st, stOK := procStat(pid)
	_ = stdin.Close()
	waitErr := cmd.Wait()
	if err := errors.Join(repErr, waitErr); err != nil {
		return r, fmt.Errorf("relay child: %w", err)
	}
	if !ok || !stOK {
		return r, errors.New("relay child: could not read /proc/<pid>/status")
	}
	r.hwm, r.rssMax = hwm, max(r.rssMax, rss)
	r.cpuSelf = float64(st.utime+st.stim) / clockTicks / r.report.Seconds

	if r.report.Delivered != int64(size) {
		return r, fmt.Errorf("verify: %d deliveries for %d requests", r.report.Delivered, size)
	}
	// Every request holds one committed claim, taken only with a
	// Delivered answer, and the deliveries number the requests: each was
	// delivered once.
	if err := verifyDrain(ctx, db, s, size); err != nil {
		return r, err
	}
	if r.db, err = dbm.stop(ctx); err != nil {
		return r, err
	}
	r.drain.n = size
	if r.drain.first, r.drain.last, err = settleSpan(ctx, db, s); err != nil {
		return r, err
	}
	if r.drain.windows, err = windows(ctx, db, s, r.drain.first, r.drain.last, cfg.window); err != nil {
		return r, err
	}
	return r, nil
}

// A backlog of at most smallBacklog requests drains in a second or two,
// where one burst of other work on the machine moves its rate a lot: it
// runs at least smallBacklogRuns times.
const (
	smallBacklog     = 100_000
	smallBacklogRuns = 5
)

// runBacklog drains each backlog size with the best drain setting.
func runBacklog(ctx context.Context, cfg config, srv server, postmaster int, res *results) error {
	dc := bestDrain(cfg, res)
	const section = "Backlog (relay in a child process)"
	runs := func(size int) int {
		if size <= smallBacklog {
			return max(cfg.longRuns, smallBacklogRuns)
		}
		return cfg.longRuns
	}
	for run := 1; run <= runs(slices.Min(cfg.backlogs)); run++ {
		for _, size := range cfg.backlogs {
			if run > runs(size) {
				continue
			}
			progress("backlog, run %d of %d: %d pending, %s", run, runs(size), size, dc)
			profile := ""
			if cfg.cpuprofile != "" {
				profile = fmt.Sprintf("%s.backlog-%d-run%d", cfg.cpuprofile, size, run)
			}
			r, err := backlogOnce(ctx, cfg, srv, postmaster, size, dc, profile)
			if err != nil {
				return fmt.Errorf("backlog %d: %w", size, err)
			}
			key := fmt.Sprintf("backlog/%d", size)
			label := fmt.Sprintf("backlog %d, %s", size, dc)
			res.add(key+"/rate", section, label+": first to last settle", "events/s", r.drain.rate(), ceilDeliver50)
			res.add(key+"/wall", section, label+": child start to empty", "events/s", float64(size)/r.report.Seconds, ceilDeliver50)
			res.add(key+"/hwm", section, label+": relay peak RSS (VmHWM)", "MiB", float64(r.hwm)/(1<<20), "")
			res.add(key+"/heap", section, label+": relay Go heap obtained from the OS (HeapSys)", "MiB", float64(r.report.HeapSys)/(1<<20), "")
			res.add(key+"/cpu", section, label+": CPU of the relay process", "cores", r.cpuSelf, "")
			if r.server.serverKnown {
				res.add(key+"/cpu-server", section, label+": CPU of PostgreSQL", "cores", r.server.server, "")
			}
			addMachine(res, key, section, label, "", r.server)
			addPerEvent(res, key, section, label, cpuUse{self: r.cpuSelf, server: r.server.server, serverKnown: r.server.serverKnown},
				float64(size)/r.report.Seconds)
			addDB(res, key, section, label, r.db, size)
			for i, v := range r.drain.windows {
				if i >= 8 {
					break
				}
				res.add(fmt.Sprintf("%s/window/%d", key, i), section,
					fmt.Sprintf("%s: window %d (%s to %s)", label, i+1, time.Duration(i)*cfg.window, time.Duration(i+1)*cfg.window),
					"events/s", v, ceilDeliver50)
			}
		}
	}
	return nil
}
