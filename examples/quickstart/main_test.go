package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/pgtest"
)

// TestMain fails the binary when the demo leaks a goroutine (the relay's,
// the pool's, the LISTEN session's or the cluster's).
func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRun runs the demo end to end on a throwaway cluster. No t.Parallel:
// t.Setenv forbids it.
func TestRun(t *testing.T) {
	t.Setenv("DATABASE_URL", "") // the throwaway cluster path

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))

	story := out.String()
	t.Log(story)
	require.Contains(t, story, "dead, order has no sku")
	require.Regexp(t, `dead: order\.placed \S+ after 1 attempt\(s\): order has no sku`, story)
	require.Contains(t, story, "re-emitted 1 record(s)")
	require.Contains(t, story, "done, sent to manual review")
	require.Contains(t, story, "no outbox row, never handed")
	require.True(t, strings.HasSuffix(story, "this run's records: 3 processed, 0 dead, 0 pending\n"),
		"the story must end with every record processed")
}
