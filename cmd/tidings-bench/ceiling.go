package main

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

//go:embed pgbench/*.sql
var pgbenchFiles embed.FS

// Keys of the ceiling figures the other scenarios are ratios to.
const (
	ceilDeliver1  = "ceiling/deliver1"
	ceilDeliver50 = "ceiling/deliver50"
)

func ceilStageKey(writers int, notify bool) string {
	return fmt.Sprintf("ceiling/stage/w%d/%t", writers, notify)
}

// pgbenchResult is what a pgbench run reports.
type pgbenchResult struct {
	tps          float64
	transactions int
}

var (
	tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection`)
	txLine  = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	abortLn = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// findPgbench returns the pgbench binary: flag, PATH, then the newest
// /usr/lib/postgresql/*/bin.
func findPgbench(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(matches) > 0 {
		slices.Sort(matches)
		return matches[len(matches)-1], nil
	}
	return "", errors.New("pgbench not found: install the PostgreSQL client tools or pass -pgbench")
}

// script renders an embedded pgbench script into dir.
func script(dir, name string, repl ...string) (string, error) {
	body, err := pgbenchFiles.ReadFile("pgbench/" + name + ".sql")
	if err != nil {
		return "", err
	}
	text := strings.NewReplacer(repl...).Replace(string(body))
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.sql", name, schemaSeq.Add(1)))
	return path, os.WriteFile(path, []byte(text), 0o644)
}

// runPgbench runs a script for d with clients and returns what pgbench
// reports.
func runPgbench(ctx context.Context, bin, dsn, path string, clients int, d time.Duration) (pgbenchResult, error) {
	jobs := min(2, clients)
	args := []string{"-n", "-f", path, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(jobs),
		"-T", strconv.Itoa(int(d.Seconds())), dsn}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	var r pgbenchResult
	m := tpsLine.FindSubmatch(out)
	t := txLine.FindSubmatch(out)
	if m == nil || t == nil {
		return r, fmt.Errorf("pgbench %s: %v: %s", filepath.Base(path), err, tail(out))
	}
	r.tps, _ = strconv.ParseFloat(string(m[1]), 64)
	r.transactions, _ = strconv.Atoi(string(t[1]))
	// A run some client left, or that pgbench calls incomplete, is no
	// ceiling: a low one would make every drain look closer to it.
	if a := abortLn.FindSubmatch(out); err != nil || a != nil && string(a[1]) != "0" || strings.Contains(string(out), "aborted in command") {
		return r, fmt.Errorf("pgbench %s failed (%v): %s", filepath.Base(path), err, tail(out))
	}
	return r, nil
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 1500 {
		s = "..." + s[len(s)-1500:]
	}
	return s
}

// pgbench is the binary and a directory for the scripts it runs.
type pgbench struct{ bin, dir string }

// newPgbench finds pgbench and makes the directory of its scripts, which
// done removes.
func newPgbench(cfg config) (p pgbench, done func(), err error) {
	if p.bin, err = findPgbench(cfg.pgbench); err != nil {
		return p, nil, err
	}
	if p.dir, err = os.MkdirTemp("", "tidings-bench-"); err != nil {
		return p, nil, err
	}
	return p, func() { _ = os.RemoveAll(p.dir) }, nil
}

// runCeiling measures what the server does with the delivery transaction
// and the staging transaction in SQL alone, driven by pgbench. When the
// drain runs too, the delivery ceilings are measured at the start of each
// of its rounds instead (runDrain), next to the drains they are the
// ceilings of: the machine's speed moves within a run, and a ceiling
// measured a quarter of an hour before the drains measured that too.
func runCeiling(ctx context.Context, cfg config, srv server, db *sql.DB, postmaster int, res *results) error {
	pb, done, err := newPgbench(cfg)
	if err != nil {
		return err
	}
	defer done()

	for run := 1; run <= cfg.runs; run++ {
		if !cfg.wants("drain") {
			if err := deliveryCeilings(ctx, cfg, srv, db, postmaster, res, pb, run); err != nil {
				return err
			}
		}
		if !cfg.ceilingStage {
			continue
		}
		for _, w := range cfg.writers {
			for _, notify := range []bool{false, true} {
				if err := ceilingStage(ctx, cfg, srv, db, res, pb, w, notify); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// deliveryCeilings runs round run of the delivery ceilings: one delivery
// per transaction, then 50.
func deliveryCeilings(ctx context.Context, cfg config, srv server, db *sql.DB, postmaster int, res *results, pb pgbench, run int) error {
	for _, v := range []struct {
		key     string
		k       int
		clients int
		rows    int
	}{
		{ceilDeliver1, 1, cfg.ceilingClients1, cfg.ceilingRows1},
		{ceilDeliver50, 50, cfg.ceilingClients50, cfg.ceilingRows50},
	} {
		progress("ceiling, run %d of %d", run, cfg.runs)
		if err := ceilingDeliver(ctx, cfg, srv, db, postmaster, res, pb, v.key, v.k, v.clients, v.rows); err != nil {
			return err
		}
	}
	return nil
}

func ceilingDeliver(ctx context.Context, cfg config, srv server, db *sql.DB, postmaster int, res *results,
	pb pgbench, key string, k, clients, rows int) error {
	s, err := newSchema(ctx, db, "ceiling")
	if err != nil {
		return err
	}
	defer s.drop(db)
	progress("ceiling: pre-filling %d pending rows for the %d-per-transaction script", rows, k)
	fill, err := pgbenchFiles.ReadFile("pgbench/prefill.sql")
	if err != nil {
		return err
	}
	insert := strings.ReplaceAll(string(fill), "{s}", s.q)
	const chunk = 250_000
	for lo := 1; lo <= rows; lo += chunk {
		if _, err := db.ExecContext(ctx, insert, lo, min(lo+chunk-1, rows)); err != nil {
			return fmt.Errorf("pre-fill: %w", err)
		}
	}
	if err := prepareDrain(ctx, db, s); err != nil {
		return err
	}
	path, err := script(pb.dir, "deliver", "{s}", s.q, "{k}", strconv.Itoa(k))
	if err != nil {
		return err
	}
	label := fmt.Sprintf("pgbench: %d delivery per tx, %d clients", k, clients)
	if k > 1 {
		label = fmt.Sprintf("pgbench: %d deliveries per tx, %d clients", k, clients)
	}
	progress("ceiling: %s, %s", label, cfg.ceilingDuration)
	dbm, err := startDB(ctx, db)
	if err != nil {
		return err
	}
	meter := startCPU(postmaster)
	r, err := runPgbench(ctx, pb.bin, srv.dsn, path, clients, cfg.ceilingDuration)
	if err != nil {
		return err
	}
	use := meter.stop()
	du, err := dbm.stop(ctx)
	if err != nil {
		return err
	}
	if du.rowUpdates, err = outboxUpdates(ctx, db, s); err != nil {
		return err
	}
	processed, err := s.count(ctx, db, `%s.outbox WHERE processed_at IS NOT NULL`)
	if err != nil {
		return err
	}
	if processed >= rows {
		return fmt.Errorf("ceiling: the script ran out of pending rows, so its rate is too low: raise -ceiling-rows%d", k)
	}
	// Rows per transaction as the table shows it, in case a claim came
	// back short; tps is pgbench's, without connection time.
	perTx := float64(processed) / float64(max(r.transactions, 1))
	res.add(key, "Ceiling (pgbench, same run)", label, "events/s", r.tps*perTx, "")
	if use.serverKnown {
		res.add(key+"/cpu-server", "Ceiling (pgbench, same run)", label+": CPU of PostgreSQL", "cores", use.server, "")
	}
	addMachine(res, key, "Ceiling (pgbench, same run)", label, " (pgbench included)", use)
	addPerEvent(res, key, "Ceiling (pgbench, same run)", label, cpuUse{server: use.server, serverKnown: use.serverKnown}, r.tps*perTx)
	addDB(res, key, "Ceiling (pgbench, same run)", label, du, processed)
	return nil
}

func ceilingStage(ctx context.Context, cfg config, srv server, db *sql.DB, res *results,
	pb pgbench, writers int, notify bool) error {
	s, err := newSchema(ctx, db, "ceilstage")
	if err != nil {
		return err
	}
	defer s.drop(db)
	ch := "NULL"
	if notify {
		ch = pq.QuoteLiteral(s.wakeChannel())
		stopListen, err := listenAndDiscard(srv.dsn, s.wakeChannel())
		if err != nil {
			return err
		}
		defer stopListen()
	}
	path, err := script(pb.dir, "stage", "{s}", s.q, "{notify}", ch)
	if err != nil {
		return err
	}
	d := cfg.stageDuration
	progress("ceiling: pgbench, staging insert, %d clients, NOTIFY %t, %s", writers, notify, d)
	r, err := runPgbench(ctx, pb.bin, srv.dsn, path, writers, d)
	if err != nil {
		return err
	}
	res.add(ceilStageKey(writers, notify), "Ceiling (pgbench, same run)",
		fmt.Sprintf("pgbench: staging insert, %d clients, %s", writers, wakeLabel(notify)), "commits/s", r.tps, "")
	return nil
}

func wakeLabel(notify bool) string {
	if notify {
		return "with NOTIFY"
	}
	return "without NOTIFY"
}

// listenAndDiscard keeps a session LISTENing on channel and reading what
// arrives, as a relay's LISTEN session does, until stop is called.
func listenAndDiscard(dsn, channel string) (stop func(), err error) {
	l := pq.NewListener(dsn, 10*time.Millisecond, time.Second, nil)
	if err := l.Listen(channel); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range l.NotificationChannel() {
		}
	}()
	return func() {
		_ = l.Close()
		<-done
	}, nil
}
