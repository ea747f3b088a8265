package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidings-go/tidings/relay"
)

func stageKey(writers int, mode string) string { return fmt.Sprintf("stage/w%d/%s", writers, mode) }

// stageModeLabel describes a staging mode.
func stageModeLabel(mode string) string {
	switch mode {
	case "notify":
		return "with NOTIFY in the transaction"
	case "after":
		return "NOTIFY after commit (relay.Waker)"
	}
	return "without NOTIFY"
}

// closeWaker stops wk and reports a wake-up it failed to send.
func closeWaker(wk *relay.Waker) {
	if err := wk.Close(); err != nil {
		progress("  waker: %v", err)
	}
}

// stageOnce commits one staged request per transaction from writers
// goroutines for d and returns commits per second. With a wake-up (notify
// or after), a session LISTENs as a relay's would; notify stages through
// the Outbox as it is, the others through Outbox.WithoutWakeUp, after
// also poking a waker once each commit returned.
func stageOnce(ctx context.Context, srv server, writers int, mode string, d time.Duration) (float64, error) {
	db, err := openPool(ctx, srv.driver, srv.dsn, writers+3)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	s, err := newSchema(ctx, db, "stage")
	if err != nil {
		return 0, err
	}
	defer s.drop(db)
	ob := s.ob.WithoutWakeUp()
	afterCommit := func() {}
	if mode != "none" {
		stop, err := listenAndDiscard(srv.dsn, s.wakeChannel())
		if err != nil {
			return 0, err
		}
		defer stop()
	}
	switch mode {
	case "notify":
		ob = s.ob
	case "after":
		wk := s.ob.NewWaker(db)
		defer closeWaker(wk)
		afterCommit = func() { wk.Wake(module) }
	}

	var commits atomic.Int64
	var stopFlag atomic.Bool
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for i := w; !stopFlag.Load(); i += writers {
				if err := (stager{db: db, ob: ob}).one(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				afterCommit()
				commits.Add(1)
			}
		})
	}
	time.Sleep(d)
	stopFlag.Store(true)
	n := commits.Load()
	elapsed := time.Since(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// runStage measures staging commits/s for each writer count and wake-up
// mode, alternating the modes, -runs times.
func runStage(ctx context.Context, cfg config, srv server, res *results) error {
	const section = "Staging: commits/s, one request per transaction"
	for run := 1; run <= cfg.runs; run++ {
		for _, w := range cfg.writers {
			for _, mode := range cfg.stageModes {
				progress("stage, run %d of %d: %d writers, %s, %s", run, cfg.runs, w, stageModeLabel(mode), cfg.stageDuration)
				v, err := stageOnce(ctx, srv, w, mode, cfg.stageDuration)
				if err != nil {
					return fmt.Errorf("stage (%d writers, %s): %w", w, stageModeLabel(mode), err)
				}
				res.add(stageKey(w, mode), section, fmt.Sprintf("Outbox.Stage, %d writers, %s", w, stageModeLabel(mode)),
					"commits/s", v, ceilStageKey(w, mode == "notify"))
			}
		}
	}
	return nil
}
