// Package relaytest runs a relay for the length of a test: the scaffold
// every test of a sink needs, written once.
package relaytest

import (
	"cmp"
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/tidings-go/tidings/relay"
)

// StopWithin is how long Supervise may take to return once its context
// ended, beyond the Config's GracePeriod, before the test fails: the
// settles and the shutdown after the grace period.
const StopWithin = 30 * time.Second

// Supervise runs relay.Supervise(db, cfg, sink) until the test ends, and
// fails the test if it returns an error: at once when it refuses to start
// (an invalid cfg, a sink that refuses it, a table that cannot be read),
// or when it stops. The returned stop ends it early and waits for it; it is
// safe to call more than once.
func Supervise(tb testing.TB, db *sql.DB, cfg relay.Config, sink relay.Sink) (stop func()) {
	tb.Helper()
	within := cmp.Or(cfg.GracePeriod, relay.GracePeriodDefault) + StopWithin
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := relay.Supervise(ctx, db, &cfg, sink)
		if ctx.Err() == nil {
			// Refused to start: say so now, not when the test ends.
			tb.Errorf("relaytest: Supervise returned before it was stopped: %v", err)
			err = nil
		}
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("relaytest: Supervise: %v", err)
				}
			case <-time.After(within):
				tb.Errorf("relaytest: Supervise did not return within %s of its context ending", within)
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}
