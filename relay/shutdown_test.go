package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/relay"
)

// Stopping a relay again and again while it drains leaves no record
// leased by a relay that has stopped: a claim that commits as its
// supervisor's context ends is still released. The lease is an hour, so a
// record left leased would stay pending for the rest of the test.
func TestShutdownReleasesEveryClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 1000
	b.stage(t, n)
	sink := newRecorder(nil)
	cfg := b.config(t)
	cfg.Concurrency = 2
	cfg.BatchSize = 1
	cfg.HandTimeout = time.Minute
	cfg.Lease = time.Hour

	for round := 0; sink.total() < n*3/4; round++ {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- relay.Supervise(ctx, b.db, &cfg, sink) }()
		// Stop it a few hands in: most stops land while a claim is on
		// the wire.
		sink.waitHands(t, min(sink.total()+1+round%7, n), 10*time.Second)
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Supervise did not return within 30 s of its context ending", round)
		}
		require.Zero(t, b.count(t, "processed_at IS NULL AND available_at > now()"),
			"round %d: records left leased by a relay that stopped", round)
	}
	supervise(t, b.db, cfg, sink)
	b.eventually(t, "processed_at IS NOT NULL", n, 30*time.Second)
}
