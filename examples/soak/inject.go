package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Storm of the terminate fault: a round every stormEvery for stormFor.
const (
	stormEvery = 200 * time.Millisecond
	stormFor   = 10 * time.Second
)

// faultLoop injects a fault drawn from the configured ones after each
// random interval, until ctx ends.
func (s *soak) faultLoop(ctx context.Context, start time.Time) {
	if len(s.opts.faults) == 0 {
		return
	}
	for {
		wait := time.Duration(float64(s.opts.faultInterval) * (0.5 + rand.Float64()))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		kind := s.opts.faults[rand.IntN(len(s.opts.faults))]
		at := since(start)
		what, err := s.inject(ctx, kind)
		s.mu.Lock()
		s.counts[kind]++
		s.mu.Unlock()
		if err != nil {
			what += fmt.Sprintf(" (error: %v)", err)
		}
		fmt.Fprintf(s.out, "%s fault %s: %s\n", at, kind, what)
	}
}

// inject injects one fault and says what it did.
func (s *soak) inject(ctx context.Context, kind string) (string, error) {
	switch kind {
	case "kill":
		s.mu.Lock()
		defer s.mu.Unlock()
		old := s.child
		_ = s.faults.Inject(kind, func() error { return old.Kill() })
		c, err := s.spawn()
		if err != nil {
			return "killed pid " + fmt.Sprint(old.PID()), err
		}
		s.child = c
		return fmt.Sprintf("SIGKILL pid %d, started pid %d", old.PID(), c.PID()), nil

	case "terminate":
		tick := time.NewTicker(stormEvery)
		defer tick.Stop()
		var rounds, pool, listen int
		for end := time.Now().Add(stormFor); time.Now().Before(end); {
			var p, l int
			err := s.faults.Inject(kind, func() error {
				return s.db.QueryRowContext(ctx, `WITH cut AS MATERIALIZED (
						SELECT application_name AS app, pg_terminate_backend(pid) AS done
						FROM pg_stat_activity WHERE application_name IN ($1, $2))
					SELECT count(*) FILTER (WHERE app = $1 AND done), count(*) FILTER (WHERE app = $2 AND done) FROM cut`,
					appRelay, appListen).Scan(&p, &l)
			})
			if err == nil {
				rounds, pool, listen = rounds+1, pool+p, listen+l
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Sprintf("%d rounds, cut short", rounds), nil
			}
		}
		return fmt.Sprintf("%d rounds in %s terminated %d pool and %d LISTEN sessions", rounds, stormFor, pool, listen), nil

	case "restart":
		start := time.Now()
		err := s.faults.Inject(kind, func() error { return s.cluster.Restart(ctx, true) })
		return fmt.Sprintf("immediate stop and start in %s", time.Since(start).Round(time.Millisecond)), err

	case "wakeup":
		var n int
		err := s.faults.Inject(kind, func() error {
			return s.db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
				FROM pg_stat_activity WHERE application_name = $1`, appListen).Scan(&n)
		})
		return fmt.Sprintf("terminated %d LISTEN session(s)", n), err
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}
